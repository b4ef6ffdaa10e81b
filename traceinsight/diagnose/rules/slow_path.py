"""slow-path: decode ran on a backend path known to be slower for decode than an alternative on the same shape.

The known slow paths are data (SLOW_PATHS): backend id -> the alternatives and the measured reason. With the
batch composition known, each launch is replayed on the alternatives with the schedule model and the saving is
the measured time above the fastest one; without it, the finding states the measured facts only.

Its launches are selected in SQL (slow_path_launches.sql), and the alternatives' median times in this trace are
per-backend baselines (backend_medians.sql); its cost is the replays.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.launch_table import select, select_groups
from traceinsight.diagnose.rule import Input
from traceinsight.diagnose.savings import excess_over_reference_ns, spread_by_time
from traceinsight.diagnose.views import LAUNCHES, spread_sample, step_ranges, steps_of
from traceinsight.diagnose.whatif import path_alternative
from traceinsight.model.occupancy import CUDA_CORE, FA2, SM90
from traceinsight.units import fmt_ns

ID = "slow-path"
NAME = "Slow backend path"
DESCRIPTION = "Decode on a backend path measured slower than an alternative for the same shape."
PASSED = "no decode launch ran on a known slow path"
NEEDS = (Input.STEPS,)
OPTIONAL = (Input.SIDECAR, Input.SCHEDULE)
USES = (LAUNCHES,)

# Launches replayed on the alternatives to price the saving (an even sample; the total is scaled up).
REPLAY_MAX_LAUNCHES = 24


@dataclass(frozen=True)
class SlowPath:
    """A backend that is slow for decode: the faster alternatives (backend ids), why, and what to change."""

    alternatives: tuple[str, ...]
    reason: str
    remedy: str


SLOW_PATHS: dict[str, SlowPath] = {
    SM90: SlowPath(
        alternatives=(FA2, CUDA_CORE),
        reason=("FlashInfer's SM90 tensor-core backend (what FlashInfer 0.6.1 picks by default on Hopper for bf16) "
                "runs one persistent CTA per SM and never splits a request along KV. Measured on an H200 it "
                "reaches ~76 % of DRAM peak at uniform B = 128 yet is ~2.5x slower than the CUDA-core decode "
                "kernel, and ~3x slower again on skewed batches (per-SM active cycles avg/max ~0.3)."),
        remedy=("Pin the tensor-core decode wrapper to backend='fa2' (FlashInfer 0.7.x resolves 'auto' to FA2 for "
                "bf16; SGLang pins fa2), or decode on the CUDA-core path when the GQA group allows it."),
    ),
}


def apply(ctx: TraceAnalysis) -> list[Finding]:
    out = []
    for group in select_groups(ctx, "slow_path_launches", backends=list(SLOW_PATHS)):
        same = [v for v, _ in group]
        v0 = same[0]
        path = SLOW_PATHS[v0.backend or ""]
        saving = 0.0
        compared = 0
        best_alt: dict[str, int] = {}
        s = ctx.schedule
        known = [v for v in same if v.batch is not None and v.batch.source == "sidecar"]
        for v in spread_sample(known, REPLAY_MAX_LAUNCHES):
            if s is None or v.batch is None:
                continue
            alts = [a for b in path.alternatives if (a := path_alternative(s, b, v.batch)) is not None
                    and a.predicted_ns is not None]
            if alts:
                best = min(alts, key=lambda a: a.predicted_ns or 0)
                compared += 1
                saving += excess_over_reference_ns(v.dur_ns, best.predicted_ns or 0)
                best_alt[best.backend] = best_alt.get(best.backend, 0) + 1
        if compared:
            saving *= len(known) / compared
        others = _medians(ctx, path.alternatives)
        steps = steps_of(same)
        med = statistics.median(v.dur_ns for v in same)
        evidence = {
            "kernel": v0.kernel,
            "backend": v0.backend,
            "launches": len(same),
            "median_dur_ns": round(med),
            "alternatives": list(path.alternatives),
            "launches_replayed": compared,
            "fastest_alternative_counts": best_alt or None,
            **{f"median_dur_ns_{b}_in_trace": round(t) for b, t in others.items()},
        }
        seen = "; ".join(f"{b} launches in this trace took a median {fmt_ns(t)}" for b, t in others.items())
        out.append(Finding(
            id=ID,
            severity=Severity.WARNING,
            steps=tuple(steps),
            summary=(f"{len(same)} decode launches on the slow {v0.backend} path ({v0.kernel}, median {fmt_ns(med)}, "
                     f"steps {step_ranges(steps)})"),
            evidence=evidence,
            explanation=path.reason + (f" Here: {seen}." if seen else ""),
            remedy=path.remedy,
            saving_ns=round(saving) if compared else None,
            step_saving_ns=spread_by_time(saving, [(v.step.index, v.dur_ns) for v in known]) if compared else {},
        ))
    return out


def _medians(ctx: TraceAnalysis, backends: tuple[str, ...]) -> dict[str, float]:
    """The median attention-kernel time (ns) of each of `backends` that has launches in this trace, in the order
    given (backend_medians.sql)."""
    rows, _ = select(ctx, "backend_medians", backends=list(backends))
    return {b: m for b, _, m in rows}
