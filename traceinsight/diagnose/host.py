"""What the host did while the GPU waited for it: the host operations (CPU ops, annotations, NVTX ranges) that
filled a step's long idle-host stretches, each against its usual time in the steps around it.

Time is counted exclusively (an op's own time, less the ops nested inside it on the same thread), clipped to the
stretches, so a wrapper around the whole step (the step's own range, a `forward` annotation) does not take the
credit for the leaf op that ran long. Ranges that enclose a whole step window are left out. What no recorded op
covers is `untracked_ns` (Python between ops: a sleep, the interpreter, a garbage-collection pause).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, cast

import numpy as np

from traceinsight.diagnose.context import TraceAnalysis

# Ops listed per step at most.
MAX_OPS = 5
# The cached product a rule that reads host evidence declares (`rule.USES`): the steps' CPU ranges.
HOST_RANGES = "host-ranges"
_RANGES = "host.cpu-step-ranges"


def _exclusive(ops: Sequence[Any], lo: int, hi: int) -> dict[str, tuple[float, int]]:
    """name -> (exclusive ns within [lo, hi), calls overlapping it), per thread nesting by time."""
    by_thread: dict[Any, list[Any]] = defaultdict(list)
    for op in ops:
        if op.start_ns < hi and lo < op.end_ns:
            by_thread[(op.process_id, op.thread_id)].append(op)
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for items in by_thread.values():
        items.sort(key=lambda o: (o.start_ns, -o.end_ns))
        stack: list[int] = []
        inner = [0.0] * len(items)
        for i, op in enumerate(items):
            while stack and items[stack[-1]].end_ns <= op.start_ns:
                stack.pop()
            if stack:
                inner[stack[-1]] += max(0, min(op.end_ns, hi) - max(op.start_ns, lo))
            stack.append(i)
        for i, op in enumerate(items):
            own = max(0, min(op.end_ns, hi) - max(op.start_ns, lo)) - inner[i]
            v = out[op.name]
            v[0] += max(own, 0.0)
            v[1] += 1
    return {k: (v[0], int(v[1])) for k, v in out.items()}


def _covered(ops: Iterable[Any], lo: int, hi: int) -> int:
    """Time of [lo, hi) covered by at least one op (ns)."""
    spans = sorted((max(o.start_ns, lo), min(o.end_ns, hi)) for o in ops if o.start_ns < hi and lo < o.end_ns)
    total, end = 0, lo
    for s, e in spans:
        s = max(s, end)
        if e > s:
            total += e - s
            end = e
    return total


def windows(ctx: TraceAnalysis, steps: Iterable[int]) -> list[tuple[int, int]]:
    """The windows of these steps (what to read host operations for)."""
    a = ctx.step_arrays()
    want = np.fromiter(set(steps), np.int64)
    at = np.flatnonzero(np.isin(a.index, want) & a.windowed)
    return list(zip(a.window_start[at].tolist(), a.window_end[at].tolist(), strict=True))


def read_ops(ctx: TraceAnalysis, steps: Iterable[int]) -> list[Any] | None:
    """The host operations within the windows of these steps, read once (None when the analysis cannot)."""
    if ctx.host_ops is None:
        return None
    return ctx.host_ops(windows(ctx, steps))


class _Ranges:
    """A set of (start, end) pairs as two int64 arrays sorted by start, then end: 16 bytes a pair, where a set of
    tuples took 150 (a long trace has a CPU range per step, 10^6)."""

    def __init__(self, start: np.ndarray, end: np.ndarray) -> None:
        order = np.lexsort((end, start))
        self.start, self.end = start[order], end[order]

    def __contains__(self, pair: object) -> bool:
        if not isinstance(pair, tuple) or len(pair) != 2:
            return False
        s, e = pair
        if not isinstance(s, int) or not isinstance(e, int):
            return False
        lo = int(np.searchsorted(self.start, s, side="left"))
        hi = int(np.searchsorted(self.start, s, side="right"))
        return lo < hi and bool((self.end[lo:hi] == e).any())


def _cpu_step_ranges(ctx: TraceAnalysis) -> _Ranges:
    """The (start, end) of every step's CPU range (built once per analysis, until `release`)."""
    got = ctx.cache.get(_RANGES)
    if got is None:
        a = ctx.step_arrays()
        got = ctx.cache[_RANGES] = _Ranges(a.cpu_range_start, a.cpu_range_end)
    return cast(_Ranges, got)


def release(ctx: TraceAnalysis) -> None:
    """Let go of the steps' CPU ranges (`HOST_RANGES`: two int64 arrays over the steps); asked again, they are made
    again."""
    ctx.cache.pop(_RANGES, None)


def host_evidence(ctx: TraceAnalysis, step: int, baseline_steps: Sequence[int],
                  ops: Sequence[Any] | None = None) -> dict[str, Any] | None:
    """The host operations that filled step `step`'s long idle-host stretches, with their usual time per step in
    `baseline_steps`; None when the analysis cannot read host operations or the step has no long stretch.
    `ops`: host operations already read for these steps (`read_ops`), else they are read here."""
    by_index = ctx.steps_by_index()
    st = by_index.get(step)
    if st is None or st.breakdown is None or not st.breakdown.host_gaps:
        return None
    b = st.breakdown
    base = [by_index[i].breakdown for i in baseline_steps if i in by_index and by_index[i].breakdown is not None]
    if ops is None:
        ops = read_ops(ctx, [step, *baseline_steps])
        if ops is None:
            return None

    # Leave out the steps' own ranges and whatever encloses a whole window (wrappers around the loop).
    step_ranges = _cpu_step_ranges(ctx)

    def inside(w0: int, w1: int) -> list[Any]:
        return [o for o in ops if o.start_ns < w1 and w0 < o.end_ns and not (o.start_ns <= w0 and o.end_ns >= w1)
                and (o.start_ns, o.end_ns) not in step_ranges]

    mine = inside(b.start_ns, b.end_ns)
    stalled: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    stall_ns = covered = 0
    for g0, g1 in b.host_gaps:
        stall_ns += g1 - g0
        covered += _covered(mine, g0, g1)
        for name, (ns, calls) in _exclusive(mine, g0, g1).items():
            stalled[name][0] += ns
            stalled[name][1] += calls
    step_totals = _exclusive(mine, b.start_ns, b.end_ns)
    usual: dict[str, list[float]] = defaultdict(list)
    for x in base:
        totals = _exclusive(inside(x.start_ns, x.end_ns), x.start_ns, x.end_ns)
        for name in stalled:
            usual[name].append(totals.get(name, (0.0, 0))[0])
    rows = []
    for name, (op_ns, op_calls) in sorted(stalled.items(), key=lambda kv: -kv[1][0]):
        if op_ns <= 0:
            continue
        u = usual.get(name) or []
        rows.append({"name": name, "calls": int(op_calls), "in_stall_ns": round(op_ns),
                     "step_ns": round(step_totals.get(name, (0.0, 0))[0]),
                     "usual_ns": round(statistics.median(u)) if u else None})
        if len(rows) >= MAX_OPS:
            break
    return {"stall_ns": stall_ns, "covered_ns": covered, "untracked_ns": stall_ns - covered,
            "baseline_steps": len(base), "recorded_ops": len(mine), "ops": rows}


def describe(ev: dict[str, Any] | None, fmt: Any) -> str | None:
    """The evidence in words ('aten::mm 4.1 ms in 40 calls, usually 0 us; 0.9 ms outside any recorded op'),
    `fmt` formatting ns."""
    if not ev:
        return None
    if not ev.get("recorded_ops"):
        return (f"the GPU waited {fmt(ev['stall_ns'])} in the longest stretches, and the trace records no host "
                "operation in the step to say what the host did (add NVTX ranges or record_function around host "
                "work, or profile CPU ops with torch.profiler)")
    parts = []
    untracked = ev["untracked_ns"] > 0.2 * ev["stall_ns"]
    lead = untracked and all(ev["untracked_ns"] >= r["in_stall_ns"] for r in ev["ops"])
    if lead:
        parts.append(f"{fmt(ev['untracked_ns'])} of the {fmt(ev['stall_ns'])} outside any recorded host op "
                     "(Python between ops: a sleep, the interpreter, a garbage-collection pause)")
    for r in ev["ops"][:3]:
        usual = "not seen in the steps around it" if not r["usual_ns"] else f"usually {fmt(r['usual_ns'])} a step"
        parts.append(f"{r['name']} {fmt(r['in_stall_ns'])} in {r['calls']} call{'s' if r['calls'] > 1 else ''}, "
                     f"{usual}")
    if untracked and not lead:
        parts.append(f"{fmt(ev['untracked_ns'])} of the {fmt(ev['stall_ns'])} outside any recorded host op "
                     "(Python between ops: a sleep, the interpreter, a garbage-collection pause)")
    return "; ".join(parts) if parts else None
