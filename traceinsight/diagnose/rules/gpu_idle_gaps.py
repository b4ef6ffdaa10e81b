"""gpu-idle-gaps: the GPU sits idle between decode steps.

Gaps are stretches with no kernel and no memory operation on the GPU that lie between two steps, from the first
step to the last, outside every step's window (`traceinsight.model.breakdown`: idle time inside a step's
window, such as host work at the start of its range, belongs to the step and is attributed by latency-spike).
Short gaps are launch latency; the long ones are the GPU waiting for
the CPU (scheduling, planning, Python, synchronisation). Gaps of a second or more are pauses of the
workload, not step overhead: they are counted apart.

Its selection is not over launches: the gaps are the model stage's IdleGaps arrays (gpu_gaps.sql finds them),
cut against the steps' windows with numpy (two binary searches). Written as SQL over the same arrays registered
as Arrow (an ASOF join of the gaps with the windows' running reach, at each end) it gave the same gaps but was
slower where it matters: on the 1M-kernel export (2.5M gaps, 229K windows) the query alone took 2.7-3.6 s where
the numpy cut takes 1.1-1.5 s with building the windows, and the rule 3.7-5.7 s against 1.9-2.5 s; a single
sorted pass with window functions was slower still. So it stays here.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.rule import Input, NotApplicable, limit
from traceinsight.diagnose.savings import idle_gap_saving_ns
from traceinsight.ingest.arrow_numpy import sorted_distinct
from traceinsight.model.schedule import IdleGaps
from traceinsight.units import fmt_ns

ID = "gpu-idle-gaps"
NAME = "GPU idle between steps"
DESCRIPTION = "Time between decode steps during which the GPU runs nothing."
PASSED = "the GPU was busy between steps (no long idle gaps)"
NEEDS = (Input.STEPS,)
OPTIONAL = ()

# Gaps shorter than this are launch latency, not counted (ns).
GAP_MIN_NS = 50_000
# Gaps at least this long are pauses of the workload (warm-up, a profiler phase, no traffic), not step overhead:
# left out of the count and of the span, and reported separately (ns).
PAUSE_MIN_NS = 1_000_000_000
# Report when counted gaps are at least this share of the time from the first step's start to the last's end.
IDLE_MIN_FRACTION = 0.1
# Warning (else info) from this share.
WARNING_FRACTION = 0.3
# What the saving is a share of in reports: idle time lies between steps, not in them (see rule.SAVING_BASIS).
SAVING_BASIS = "span"


# How many gaps are cut against the windows at a time (a 10M-kernel trace has ~25M gaps: each temporary array of
# the cut would be 200 MB at once).
CHUNK_MAX_GAPS = 1 << 20


def outside_window_chunks(gaps: IdleGaps, ctx: TraceAnalysis, min_ns: int = 0
                          ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The part of each gap outside every step's window, as arrays (start_ns, end_ns, before_step) of the gaps
    with something left, CHUNK_MAX_GAPS gaps at a time, in order (the gaps as they are when no step has a window). A gap
    lies between two steps' GPU work, so a window can only cover its head (the next step's range opened before its
    first kernel) or its tail (the previous step's range stayed open after its GPU work): what remains is one
    stretch, or nothing. Vectorised: a long trace has a gap between most of its kernels. `min_ns`: gaps shorter
    than this are left out before the cut (what remains of a gap is never longer than the gap; most gaps of a
    long trace are launch latency)."""
    n = len(gaps)
    arrays = ctx.step_arrays()
    if not n or not arrays.windowed.any():
        g0, g1, before = gaps.chunk(0, n)
        keep = g1 - g0 >= min_ns if min_ns > 0 else slice(None)
        yield g0[keep], g1[keep], before[keep]
        return
    starts = arrays.window_start[arrays.windowed]
    order = np.argsort(starts, kind="stable")
    w0 = starts[order]
    w1 = np.maximum.accumulate(arrays.window_end[arrays.windowed][order])
    del starts, order
    for at in range(0, n, CHUNK_MAX_GAPS):
        g0, g1, before = gaps.chunk(at, at + CHUNK_MAX_GAPS)
        if min_ns > 0:
            long = g1 - g0 >= min_ns
            g0, g1, before = g0[long], g1[long], before[long]
        i = np.searchsorted(w0, g0, side="right") - 1  # the last window starting at or before the gap
        lo = np.where((i >= 0) & (w1[np.maximum(i, 0)] > g0), w1[np.maximum(i, 0)], g0)
        k = np.searchsorted(w0, g1, side="left") - 1  # the last window starting before the gap's end
        hi = np.minimum(np.where((k >= 0) & (w0[np.maximum(k, 0)] > lo), w0[np.maximum(k, 0)], g1), g1)
        keep = hi > lo
        yield lo[keep], hi[keep], before[keep]


def apply(ctx: TraceAnalysis) -> list[Finding]:
    s = ctx.schedule
    if s is None:
        raise NotApplicable("the schedule model did not run")
    if len(ctx.steps) < 2:
        raise NotApplicable("fewer than two steps")
    gap_min = limit(ctx, ID, "GAP_MIN_NS", GAP_MIN_NS)
    pause_min = limit(ctx, ID, "PAUSE_MIN_NS", PAUSE_MIN_NS)
    pauses = pause_ns = 0
    counted_durs, counted_before = [], []  # of the gaps counted (between gap_min and pause_min), per chunk
    # A gap shorter than both limits is neither counted nor a pause, whatever the windows leave of it.
    for lo, hi, before in outside_window_chunks(s.idle_gaps, ctx, int(min(gap_min, pause_min))):
        dur = hi - lo
        paused = dur >= pause_min
        counted = (dur >= gap_min) & ~paused
        pauses += int(paused.sum())
        pause_ns += int(dur[paused].sum())
        counted_durs.append(dur[counted])
        counted_before.append(before[counted])
    gap_durs, gap_before = np.concatenate(counted_durs), np.concatenate(counted_before)
    arrays = ctx.step_arrays()
    span = int(arrays.end.max()) - int(arrays.start.min()) - pause_ns
    total = idle_gap_saving_ns(gap_durs, int(gap_min))
    frac = total / span if span > 0 else 0.0
    if not len(gap_durs) or frac < limit(ctx, ID, "IDLE_MIN_FRACTION", IDLE_MIN_FRACTION):
        return []
    j = int(np.argmax(gap_durs))
    longest_ns, longest_before = int(gap_durs[j]), int(gap_before[j])
    evidence = {
        "gaps": len(gap_durs),
        "idle_ns": round(total),
        "span_ns": span,
        "idle_fraction": round(frac, 3),
        "median_gap_ns": round(float(np.median(gap_durs))),
        "longest_gap_ns": longest_ns,
        "longest_gap_before_step": longest_before,
        "gap_min_ns": int(gap_min),
        "pauses": pauses,
        "pause_ns": pause_ns,
    }
    return [Finding(
        id=ID,
        severity=Severity.WARNING if frac >= WARNING_FRACTION else Severity.INFO,
        steps=tuple(sorted_distinct(gap_before).tolist()),
        summary=(f"GPU idle between steps {frac:.0%} of the time from the first step to the last: "
                 f"{evidence['gaps']} gaps >= {fmt_ns(gap_min)}, "
                 f"{fmt_ns(total)} in all, longest {fmt_ns(longest_ns)} before step {longest_before}"),
        evidence=evidence,
        explanation=(
            "Between these steps nothing ran on the GPU: it was waiting for the host to schedule the next batch, "
            "plan attention, copy inputs or synchronise. That time adds to every request's latency but never "
            "shows up in kernel timings."),
        remedy=("Overlap CPU work with GPU work (CUDA graphs for the decode step, asynchronous scheduling, planning "
                "the next step while the current one runs), and avoid host synchronisation inside the step loop."),
        saving_ns=round(total),
    )]
