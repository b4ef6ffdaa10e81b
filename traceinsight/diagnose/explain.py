"""Why one step took what it took: its breakdown beside its baseline's, the attribution of its excess, the
kernels and host operations that grew, the cause and the remedy (`traceinsight explain TRACE --step N`)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from traceinsight.components import IDLE_HOST, PREFILL
from traceinsight.diagnose import remedies
from traceinsight.diagnose.attribution import StepAttribution
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.host import host_evidence
from traceinsight.diagnose.rules import latency_spike
from traceinsight.model.gpu_work import component_of_family, prefill_kernels
from traceinsight.model.steps import Kernel, Step

SCHEMA = "traceinsight.explain/1"
# Kernels listed (those whose time changed most against the baseline steps).
MAX_KERNELS = 8


@dataclass(frozen=True)
class KernelDelta:
    """One kernel (by short name and component) in the step against its median in the baseline steps (ns)."""

    kernel: str
    component: str
    count: int
    step_ns: int
    baseline_ns: float

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "component": self.component, "count": self.count, "step_ns": self.step_ns,
                "baseline_ns": round(self.baseline_ns), "delta_ns": round(self.step_ns - self.baseline_ns)}


@dataclass(frozen=True)
class StepExplanation:
    step: int
    name: str
    phase: str
    attribution: StepAttribution
    cause: str | None
    cause_component: str | None
    incident: dict[str, Any] | None
    baseline_steps: list[int]
    kernels: list[KernelDelta]
    host: dict[str, Any] | None
    remedy: str
    breakdown: dict[str, Any] | None = field(default=None)
    tiles: dict[str, Any] | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        a = self.attribution
        return {
            "schema": SCHEMA,
            "step": self.step,
            "name": self.name,
            "phase": self.phase,
            "wall_ns": a.wall_ns,
            "baseline_ns": round(a.baseline_ns),
            "excess_ns": round(a.excess_ns),
            "ratio": round(a.ratio, 3),
            "spike": a.spike,
            "baseline": a.method,
            "baseline_steps": self.baseline_steps,
            "breakdown": self.breakdown,
            "attribution": [p.to_json() for p in a.parts],
            "cause": self.cause,
            "cause_component": self.cause_component,
            "incident": self.incident,
            "kernels": [k.to_json() for k in self.kernels],
            "host": self.host,
            "tiles": self.tiles,
            "remedy": self.remedy,
        }


def _kernel_totals(step: Step, kernels: list[Kernel]) -> dict[tuple[str, str], tuple[int, int]]:
    """(short name, component) -> (count, ns) over the step's kernels, attention launches by phase, as the
    breakdown counts them."""
    prefill = prefill_kernels((step,))
    acc: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for k in kernels:
        v = acc[(k.kernel, PREFILL if k.kernel_id in prefill else component_of_family(k.family))]
        v[0] += 1
        v[1] += k.dur_ns
    return {key: (v[0], v[1]) for key, v in acc.items()}


def kernel_deltas(step: Step, baseline: list[Step], kernels_of: Callable[[Step], list[Kernel]]
                  ) -> list[KernelDelta]:
    """The step's kernels (by short name; `kernels_of` reads a step's kernels) against their median total in
    the baseline steps, largest change first."""
    mine = _kernel_totals(step, kernels_of(step))
    theirs = [_kernel_totals(s, kernels_of(s)) for s in baseline]
    keys = set(mine) | {k for t in theirs for k in t}
    rows = []
    for key in keys:
        count, ns = mine.get(key, (0, 0))
        base = statistics.median([t.get(key, (0, 0))[1] for t in theirs]) if theirs else 0.0
        rows.append(KernelDelta(key[0], key[1], count, ns, float(base)))
    rows.sort(key=lambda r: -abs(r.step_ns - r.baseline_ns))
    return rows[:MAX_KERNELS]


def explain_step(ctx: TraceAnalysis, index: int) -> StepExplanation:
    """The explanation of step `index` (KeyError when the trace has no such step or it has no attribution)."""
    table = latency_spike.attributions(ctx)
    att = table[index]
    by_index = ctx.steps_by_index()
    step = by_index[index]
    baseline = latency_spike.neighbours(ctx, table, index, latency_spike.HOST_BASELINE_STEPS)
    by_step: dict[int, list[Any]] = defaultdict(list)
    for f in ctx.findings:
        for s in f.steps:
            by_step[s].append(f)
    incident = None
    cause: str | None = None
    component: str | None = None
    for f in ctx.findings:
        # The incident holding the step: a latency spike's, else a slow-steps run's (not the groups of either).
        if f.id in (latency_spike.ID, "slow-steps") and index in f.steps and not f.evidence.get("group"):
            incident = {"summary": f.summary, "first_step": f.evidence.get("first_step"),
                        "last_step": f.evidence.get("last_step"), "onset_steps": f.evidence.get("onset_steps"),
                        "threshold_step": f.evidence.get("threshold_step")}
            cause, component = f.evidence.get("cause"), f.evidence.get("cause_component")
            remedy = f.remedy
            break
    else:
        component = att.component if att.excess_ns > 0 else None
        finding = None
        if component is not None:
            cause, finding = latency_spike.cause_of(att, component, by_step)
        remedy = finding.remedy if finding is not None else (
            remedies.remedy(cause, remedies.facts(ctx), step_phase=step.phase) if cause else "")
    host = None
    grown = att.part(IDLE_HOST)
    if grown is not None and grown.delta_ns > 0:
        host = host_evidence(ctx, index, baseline)
    return StepExplanation(
        step=index, name=step.name, phase=step.phase, attribution=att, cause=cause, cause_component=component,
        incident=incident, baseline_steps=baseline,
        kernels=kernel_deltas(step, [by_index[i] for i in baseline if i in by_index],
                              ctx.step_kernels or (lambda s: [])),
        host=host, remedy=remedy,
        breakdown=step.breakdown.to_json() if step.breakdown is not None else None,
        tiles=next((x.tiles for x in step.launches if x.tiles is not None), None),
    )
