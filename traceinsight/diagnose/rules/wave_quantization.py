"""wave-quantization: the grid is a little more than a whole number of waves, and the last wave runs nearly
empty.

A non-persistent grid runs in waves of num_SM x occupancy CTAs. With waves = CTAs / slots just above an
integer, the last partial wave keeps few SMs busy. The loss is priced with the schedule model: the simulated
time against the time the same work takes at full-GPU throughput, applied to the measured time (memory-bound
CTAs speed up when they run alone, so the naive ceil(waves) / waves overstates it).

Its selection stays in Python: a launch qualifies by its planned CTA count, its work items' evenness and the
loss the calibrated cost model prices (`throughput_floor_ns` over the plan), all functions of the model stage's
objects rather than columns of the launch relation. Only a prefilter could be SQL (backend, waves and last-wave
fill, evenness), and it would need the plan's CTA count, the occupancy and the imbalance as new columns of the
relation while leaving the deciding test, the priced loss, to Python.
"""

from __future__ import annotations

import math

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.rule import Input, limit
from traceinsight.diagnose.savings import by_step
from traceinsight.diagnose.views import LAUNCHES, LaunchView, by_kernel, launch_views, step_ranges, steps_of
from traceinsight.model.launch_models import throughput_floor_ns
from traceinsight.model.occupancy import CUDA_CORE, FA2

ID = "wave-quantization"
NAME = "Wave quantization"
DESCRIPTION = "Grids slightly over a whole number of waves, whose last wave leaves most SMs idle."
PASSED = "no launch lost a significant share of its time to a partial last wave"
NEEDS = (Input.STEPS, Input.THRESHOLDS, Input.SCHEDULE)
OPTIONAL = ()
USES = (LAUNCHES,)

BACKENDS = (CUDA_CORE, FA2)
# The last wave counts as nearly empty when it is filled to at most this fraction.
LAST_WAVE_FILL_MAX = 0.5
# Only launches whose work items are even (longest item / mean item at most this) are quantization, not skew.
ITEM_IMBALANCE_MAX = 1.5
# Report a launch when the partial wave costs at least this share of its time.
LOSS_MIN_FRACTION = 0.1


def _loss(ctx: TraceAnalysis, v: LaunchView) -> tuple[float, float, float] | None:
    """(waves, last-wave fill, loss fraction) of a simulated launch, None when not applicable."""
    s = ctx.schedule
    m = v.model
    t = v.threshold
    if s is None or s.gpu is None or m is None or m.plan is None or m.sim is None or t is None or not t.occupancy:
        return None
    cost = s.costs.get(v.name)
    if cost is None or (m.imbalance or 0) > ITEM_IMBALANCE_MAX:
        return None
    slots = t.occupancy * s.gpu.num_sms
    waves = m.plan.num_ctas / slots
    fill = waves - math.floor(waves)
    if waves <= 1 or fill == 0 or fill > limit(ctx, ID, "LAST_WAVE_FILL_MAX", LAST_WAVE_FILL_MAX):
        return None
    ideal = throughput_floor_ns(m.plan, s.gpu, t.occupancy, cost)
    loss = max(0.0, 1.0 - ideal / m.sim.predicted_ns) if m.sim.predicted_ns else 0.0
    return waves, fill, loss


def apply(ctx: TraceAnalysis) -> list[Finding]:
    loss_min = limit(ctx, ID, "LOSS_MIN_FRACTION", LOSS_MIN_FRACTION)
    out = []
    for same in by_kernel(v for v in launch_views(ctx) if v.backend in BACKENDS).values():
        hits = []
        for v in same:
            r = _loss(ctx, v)
            if r is not None and r[2] >= loss_min:
                hits.append((v, *r))
        if not hits:
            continue
        wv, waves, fill, loss = max(hits, key=lambda h: h[3] * h[0].dur_ns)
        steps = steps_of(h[0] for h in hits)
        t = wv.threshold
        assert t is not None
        evidence = {
            "kernel": wv.kernel,
            "backend": wv.backend,
            "launches": len(hits),
            "worst_step": wv.step.index,
            "worst_ctas": wv.model.plan.num_ctas if wv.model and wv.model.plan else None,
            "slots": t.occupancy * t.num_sms,
            "worst_waves": round(waves, 3),
            "worst_last_wave_fill": round(fill, 3),
            "worst_loss_fraction": round(loss, 3),
            "worst_dur_ns": wv.dur_ns,
        }
        out.append(Finding(
            id=ID,
            severity=Severity.INFO,
            steps=tuple(steps),
            summary=(f"partial last wave in {len(hits)} launches of {wv.kernel} (steps {step_ranges(steps)}): "
                     f"{waves:.2f} waves, last one {fill:.0%} full, ~{loss:.0%} of the time"),
            evidence=evidence,
            explanation=(
                f"The GPU runs {t.occupancy} CTAs of this kernel on each of its {t.num_sms} SMs at once "
                f"({t.occupancy * t.num_sms} slots). The launch had {evidence['worst_ctas']} CTAs of similar size: "
                f"{waves:.2f} waves, so after the full waves a last one of {fill:.0%} ran on a mostly idle GPU."),
            remedy=("Size the work so the CTA count is just under a whole number of waves (e.g. a slightly larger "
                    "KV chunk, or a batch size that keeps B x H_kv at or under the slot count)."),
            saving_ns=round(sum(h[3] * h[0].dur_ns for h in hits)),
            step_saving_ns=by_step((h[0].step.index, h[3] * h[0].dur_ns) for h in hits),
        ))
    return out
