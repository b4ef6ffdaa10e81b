"""sm-idle: a large share of the SMs' time inside the kernel is idle.

Measured by Nsight Compute when its CSV was matched to the launch (1 - avg/max of sm__cycles_active: the
share of the busiest SM's active time the average SM sat idle), else simulated by the schedule model
(1 - sum of per-SM busy time / (num_SM x makespan)). The launches are selected in SQL (idle_launches.sql).
"""

from __future__ import annotations

import statistics

from traceinsight.diagnose import remedies
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.launch_table import select_groups
from traceinsight.diagnose.rule import Input, NotApplicable, has, limit
from traceinsight.diagnose.savings import balanced_saving_ns, by_step
from traceinsight.diagnose.views import LAUNCHES, LaunchView, step_ranges, steps_of

ID = "sm-idle"
NAME = "SM idle fraction"
DESCRIPTION = "Kernels during which the average SM sits idle for a large share of the time."
PASSED = "every measured or simulated launch kept its SMs busy"
NEEDS = (Input.STEPS,)
OPTIONAL = (Input.NCU, Input.SCHEDULE)
USES = (LAUNCHES,)

# Idle fraction from which a launch counts.
IDLE_MIN_FRACTION = 0.2
# Idle fraction from which the finding is a warning (else info).
WARNING_FRACTION = 0.5
# Launches shorter than this are ignored (ns).
KERNEL_MIN_NS = 20_000


def apply(ctx: TraceAnalysis) -> list[Finding]:
    if not (has(ctx, Input.NCU) or has(ctx, Input.SCHEDULE)):
        raise NotApplicable("needs Nsight Compute metrics (--ncu CSV) or a simulated schedule (--meta SIDECAR)")
    idle_min = limit(ctx, ID, "IDLE_MIN_FRACTION", IDLE_MIN_FRACTION)
    ns_min = limit(ctx, ID, "KERNEL_MIN_NS", KERNEL_MIN_NS)
    out = []
    for group in select_groups(ctx, "idle_launches", idle_min=idle_min, min_ns=ns_min):
        hits: list[tuple[LaunchView, float, str]] = [(v, idle, source) for v, (idle, source) in group]
        wv, w_idle, w_src = max(hits, key=lambda h: h[1])
        steps = steps_of(h[0] for h in hits)
        sources = sorted({h[2] for h in hits})
        mean_idle = statistics.fmean(h[1] for h in hits)
        evidence = {
            "kernel": wv.kernel,
            "backend": wv.backend,
            "launches": len(hits),
            "mean_sm_idle": round(mean_idle, 3),
            "worst_sm_idle": round(w_idle, 3),
            "worst_step": wv.step.index,
            "worst_dur_ns": wv.dur_ns,
            "source": "+".join(sources),
        }
        if wv.measured is not None:
            evidence.update(worst_sm_active_avg=wv.measured.sm_active_avg,
                            worst_sm_active_max=wv.measured.sm_active_max)
        how = "measured by Nsight Compute" if w_src == "ncu" else "simulated from the planner's schedule"
        out.append(Finding(
            id=ID,
            severity=Severity.WARNING if w_idle >= WARNING_FRACTION else Severity.INFO,
            steps=tuple(steps),
            summary=(f"SMs idle {w_idle:.0%} of the time in {wv.kernel} (step {wv.step.index}; {len(hits)} launches "
                     f"at >= {idle_min:.0%}, steps {step_ranges(steps)}; {'+'.join(sources)})"),
            evidence=evidence,
            explanation=(
                "A GPU is only as fast as its busiest SM. Here the average SM was busy for only "
                f"{1 - w_idle:.0%} of the time the busiest one was ({how}), so the same work spread evenly "
                "would finish in about that fraction of the time."),
            remedy=remedies.remedy(ID, remedies.facts(ctx), backends=[wv.backend or ""]),
            saving_ns=round(sum(balanced_saving_ns(h[0].dur_ns, h[1]) for h in hits)),
            step_saving_ns=by_step((h[0].step.index, balanced_saving_ns(h[0].dur_ns, h[1])) for h in hits),
        ))
    return out
