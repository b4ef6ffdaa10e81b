"""Launches slower than their balanced reference, selected by the named query slow_launches.sql over the
analysis's launch relation (`traceinsight.diagnose.launch_table`); the rules price and phrase them. Times in ns."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.launch_table import select, select_groups
from traceinsight.diagnose.views import LaunchView


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
