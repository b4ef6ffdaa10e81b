"""gpu-idle-gaps: the GPU sits idle between decode steps.

Gaps are stretches with no kernel and no memory operation on the GPU that lie between two steps, from the first
step to the last, outside every step's window (`traceinsight.model.breakdown`: idle time inside a step's
window, such as host work at the start of its range, belongs to the step and is attributed by latency-spike).
Short gaps are launch latency; the long ones are the GPU waiting for
the CPU (scheduling, planning, Python, synchronisation). Gaps of a second or more are pauses of the
workload, not step overhead: they are counted apart.
"""

from __future__ import annotations

import bisect
import statistics

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.rule import Input, NotApplicable, limit
from traceinsight.diagnose.savings import idle_gap_saving_ns
from traceinsight.diagnose.views import fmt_ms
from traceinsight.model.attach import IdleGap

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


def outside_windows(gaps: list[IdleGap], ctx: TraceAnalysis) -> list[IdleGap]:
    """The parts of `gaps` outside every step's window (each gap cut into the pieces that remain)."""
    windows = sorted((st.breakdown.start_ns, st.breakdown.end_ns) for st in ctx.steps if st.breakdown is not None)
    if not windows:
        return list(gaps)
    starts = [w[0] for w in windows]
    out = []
    for g in gaps:
        lo = g.start_ns
        i = max(0, bisect.bisect_right(starts, lo) - 1)
        while i < len(windows) and windows[i][0] < g.end_ns:
            w0, w1 = windows[i]
            if w1 > lo:
                if w0 > lo:
                    out.append(IdleGap(lo, w0, g.before_step))
                lo = max(lo, w1)
            i += 1
        if lo < g.end_ns:
            out.append(IdleGap(lo, g.end_ns, g.before_step))
    return out


def apply(ctx: TraceAnalysis) -> list[Finding]:
    s = ctx.schedule
    if s is None:
        raise NotApplicable("the schedule model did not run")
    if len(ctx.steps) < 2:
        raise NotApplicable("fewer than two steps")
    gap_min = limit(ctx, ID, "GAP_MIN_NS", GAP_MIN_NS)
    pause_min = limit(ctx, ID, "PAUSE_MIN_NS", PAUSE_MIN_NS)
    outside = outside_windows(s.idle_gaps, ctx)
    pauses = [g for g in outside if g.dur_ns >= pause_min]
    gaps = [g for g in outside if gap_min <= g.dur_ns < pause_min]
    span = (max(st.end_ns for st in ctx.steps) - min(st.start_ns for st in ctx.steps)
            - sum(g.dur_ns for g in pauses))
    total = idle_gap_saving_ns([g.dur_ns for g in gaps], int(gap_min))
    frac = total / span if span > 0 else 0.0
    if not gaps or frac < limit(ctx, ID, "IDLE_MIN_FRACTION", IDLE_MIN_FRACTION):
        return []
    longest = max(gaps, key=lambda g: g.dur_ns)
    evidence = {
        "gaps": len(gaps),
        "idle_ns": round(total),
        "span_ns": span,
        "idle_fraction": round(frac, 3),
        "median_gap_ns": round(statistics.median(g.dur_ns for g in gaps)),
        "longest_gap_ns": longest.dur_ns,
        "longest_gap_before_step": longest.before_step,
        "gap_min_ns": int(gap_min),
        "pauses": len(pauses),
        "pause_ns": sum(g.dur_ns for g in pauses),
    }
    return [Finding(
        id=ID,
        severity=Severity.WARNING if frac >= WARNING_FRACTION else Severity.INFO,
        steps=tuple(sorted({g.before_step for g in gaps})),
        summary=(f"GPU idle {frac:.0%} of the time between steps: {len(gaps)} gaps >= {fmt_ms(gap_min)}, "
                 f"{fmt_ms(total)} in all, longest {fmt_ms(longest.dur_ns)} before step {longest.before_step}"),
        evidence=evidence,
        explanation=(
            "Between these steps nothing ran on the GPU: it was waiting for the host to schedule the next batch, "
            "plan attention, copy inputs or synchronise. That time adds to every request's latency but never "
            "shows up in kernel timings."),
        remedy=("Overlap CPU work with GPU work (CUDA graphs for the decode step, asynchronous scheduling, planning "
                "the next step while the current one runs), and avoid host synchronisation inside the step loop."),
        saving_ns=round(total),
    )]
