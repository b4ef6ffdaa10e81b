"""Shared, cached analyses of the real H200 captures for the diagnose / attach / whatif tests (each analysis is
computed once per test session; importing this module from another test file shares the cache), and the ground
truth read straight from the sweeps' meta files with gzip + json (independently of the analyzer)."""

from __future__ import annotations

import gzip
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.pipeline import analyze

H200 = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "h200"
SWEEP = H200 / "flashinfer_decode_sweep.pt.trace.json.gz"
SWEEP_META = H200 / "flashinfer_decode_sweep.meta.json.gz"
FA2 = H200 / "flashinfer_fa2_decode_sweep.pt.trace.json.gz"
FA2_META = H200 / "flashinfer_fa2_decode_sweep.meta.json.gz"
NCU = H200 / "flashinfer_decode.ncu.csv"
SMALL = H200 / "flashinfer_decode_small.pt.trace.json.gz"

_CASE = re.compile(r"tc=(\d)(?: backend=(\w+))? dist=(\w+) bs=(\d+)")


@cache
def sweep(meta: bool) -> TraceAnalysis:
    """The CUDA-core + SM90 sweep; with meta also the ncu CSV (its NVTX ranges match the sweep's case names)."""
    _, [a] = analyze([SWEEP], meta=[SWEEP_META] if meta else [], ncu=[NCU] if meta else [])
    return a


@cache
def fa2(meta: bool) -> TraceAnalysis:
    _, [a] = analyze([FA2], meta=[FA2_META] if meta else [])
    return a


@cache
def meta_cases(path: Path) -> dict[tuple[int, str, int], dict[str, Any]]:
    """(tc, dist, B) -> case of a sweep meta file."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return {(c["tc"], c["dist"], c["B"]): c for c in doc["cases"]}


def case_of(step_name: str) -> tuple[int, str, int] | None:
    """(tc, dist, B) from a range name such as 'decode tc=0 dist=skew40 bs=296 step=1'; None for launch steps."""
    m = _CASE.search(step_name)
    return (int(m[1]), m[3], int(m[4])) if m else None


def cases_of(a: TraceAnalysis, steps: tuple[int, ...] | list[int]) -> set[tuple[int, str, int]]:
    """The cases of the range steps among `steps` (launch steps without a name are skipped)."""
    names = {s.index: s.name for s in a.steps}
    return {c for i in steps if (c := case_of(names[i])) is not None}


def findings(a: TraceAnalysis, rule_id: str) -> list[Any]:
    return [f for f in a.findings if f.id == rule_id]


def steps_with(a: TraceAnalysis, rule_id: str) -> set[int]:
    return {s for f in findings(a, rule_id) for s in f.steps}


def test_cases_parse_from_range_names() -> None:
    assert case_of("decode tc=0 dist=skew40 bs=296 step=1") == (0, "skew40", 296)
    assert case_of("decode tc=1 backend=fa2 dist=two40 bs=64 step=0") == (1, "two40", 64)
    assert case_of("BatchDecodeWithPagedKVCacheKernel launch 4") is None


def test_step_ranges_names_runs_and_counts_the_rest() -> None:
    from traceinsight.diagnose.views import step_ranges

    assert step_ranges([]) == "-"
    assert step_ranges([1, 2, 3, 5, 9, 10]) == "1-3, 5, 9-10"
    evens = list(range(0, 20, 2))  # exactly 10 runs: all named
    assert step_ranges(evens) == ", ".join(map(str, evens))
    assert step_ranges([*evens, 20]) == ", ".join(map(str, evens)) + ", ... and 1 more step"
    assert step_ranges([*evens, 20, 21, 22, 30]) == ", ".join(map(str, evens)) + ", ... and 4 more steps"
    assert step_ranges(list(range(1_000_000)), max_runs=1) == "0-999999"
