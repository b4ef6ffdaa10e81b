"""Launches slower than their balanced reference, selected by the named query slow_launches.sql over the
analysis's launch relation (`traceinsight.diagnose.launch_table`); the rules price and phrase them. Times in ns."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.launch_table import select, select_groups, select_table
from traceinsight.diagnose.views import LaunchView
from traceinsight.ingest.arrow_numpy import encode, numbers


class Slowdown(NamedTuple):
    """A launch against its balanced reference (ns), as slow_launches.sql judged it: `reference` says how the
    reference was estimated ('model', 'split-on median' or 'median'); typical_ns: the kernel family's typical
    time in the trace (kernel_baselines.sql); ratio: dur_ns / reference_ns; excess_ns: the time above it."""

    view: LaunchView
    reference_ns: float
    reference: str
    typical_ns: float
    ratio: float
    excess_ns: float


def _params(backends: tuple[str, ...] | None, split_kv: bool | None, ratio_min: float, excess_min_ns: float,
            unsimulated: bool = False) -> dict[str, Any]:
    """slow_launches.sql's parameters."""
    return {"backends": list(backends) if backends is not None else None, "split_kv": split_kv,
            "unsimulated": unsimulated, "ratio_min": float(ratio_min), "excess_min": float(excess_min_ns)}


def slow_rows(ctx: TraceAnalysis, backends: tuple[str, ...] | None, split_kv: bool | None, ratio_min: float,
              excess_min_ns: float, unsimulated: bool = False) -> Iterator[tuple[int, int, Slowdown]]:
    """(the number of the launch's kernel name, its position, hit) for every launch slow_launches.sql selects, in
    its order (per kernel name in first-seen order, which its number follows; then launch order)."""
    rows, views = select(ctx, "slow_launches", **_params(backends, split_kv, ratio_min, excess_min_ns, unsimulated))
    for pos, name_id, ref, how, typical, ratio, excess in rows:
        yield name_id, pos, Slowdown(views[pos], ref, how, typical, ratio, excess)


class SlowColumns(NamedTuple):
    """`slow_rows` as columns (numpy, row i one selected launch, in the query's order): its position, the number
    of its kernel name, its excess over the reference (ns), and how the reference was estimated (`references`
    [reference[i]])."""

    pos: np.ndarray
    name_id: np.ndarray
    excess_ns: np.ndarray
    reference: np.ndarray
    references: list[str]


def slow_columns(ctx: TraceAnalysis, backends: tuple[str, ...] | None, split_kv: bool | None, ratio_min: float,
                 excess_min_ns: float, unsimulated: bool = False) -> SlowColumns:
    """What `slow_rows` selects, as columns (no tuple or Slowdown per launch: a long trace may select 10^5)."""
    result, _ = select_table(ctx, "slow_launches",
                             **_params(backends, split_kv, ratio_min, excess_min_ns, unsimulated))
    if not result.num_rows:
        empty = np.zeros(0, np.int64)
        return SlowColumns(empty, empty, np.zeros(0), empty, [])
    col = {name: result.column(name).combine_chunks() for name in ("pos", "name_id", "excess_ns", "reference")}
    words, codes = encode(col["reference"])
    return SlowColumns(numbers(col["pos"]).astype(np.int64), numbers(col["name_id"]).astype(np.int64),
                       numbers(col["excess_ns"]).astype(np.float64), codes, words)


def slow_launches(
    ctx: TraceAnalysis, backends: tuple[str, ...], split_kv: bool, ratio_min: float, excess_min_ns: float
) -> list[list[Slowdown]]:
    """Per attention kernel of `backends` (first-seen order), its launches whose split-KV state is `split_kv` and
    that are slow against their balanced reference (slow_launches.sql); kernels without such a launch are left
    out."""
    return [[Slowdown(v, *rest) for v, rest in group]
            for group in select_groups(ctx, "slow_launches", **_params(backends, split_kv, ratio_min, excess_min_ns))]


def worst(hits: list[Slowdown]) -> Slowdown:
    """The hit with the largest excess time."""
    return max(hits, key=lambda h: h.excess_ns)
