"""How a diagnostic is declared and run (after Nsight Compute's rule files).

A rule is one module under `traceinsight.diagnose.rules` with:
- `ID` (stable, kebab-case), `NAME` (human), `DESCRIPTION` (one line), `PASSED` (what "nothing found" means);
- `NEEDS`: the inputs it cannot work without (`Input`); `OPTIONAL`: inputs it uses when present;
- `apply(ctx) -> list[Finding]`, where ctx is the `TraceAnalysis`. A rule may raise `NotApplicable(reason)` when
  it finds at run time that it cannot judge;
- optionally `READS`: the ids of the rules whose findings it reads (rules that run before it). While it runs,
  `ctx.findings` holds the findings of those rules and no others (none for a rule that declares none), so what
  a rule depends on is written down (`registry.run_rules`);
- optionally `USES`: the products cached on the analysis that it reads (`registry.PRODUCTS`: the launches, the
  attribution table, the steps' host ranges). The runner lets each go after the last rule that uses it; a rule
  that reads one without declaring it still works (it makes it again), at the cost of making it again;
- optionally `SAVING_BASIS`: what reports express its saving as a share of — "steps" (the default: the
  steps' time) or "span" (the time from the first step to the last, for savings that lie between steps).
Thresholds are module constants with units in their names; `limit(ctx, ID, "NAME", DEFAULT)` lets
`ctx.limits["rule-id.NAME"]` override one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from types import ModuleType
from typing import Any, Protocol

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding


class Input(StrEnum):
    """What a rule can need, and how to tell whether a trace's analysis has it."""

    STEPS = "steps"  # decode steps with attention launches
    GPU = "gpu"  # a GPU model (table entry or the trace's device properties)
    THRESHOLDS = "thresholds"  # occupancy / split-KV threshold of some attention kernel
    SIDECAR = "sidecar"  # batch composition (KV lengths) of some step from a sidecar
    SCHEDULE = "schedule"  # simulated schedule (calibrated cost model) of some launch
    NCU = "ncu"  # Nsight Compute sm__cycles_active matched to some launch
    SHAPE = "shape"  # the model's attention shape (heads, head_dim) from a sidecar
    BANDWIDTH = "bandwidth"  # the GPU's peak HBM bandwidth


def _has(ctx: TraceAnalysis, what: Input) -> bool:
    s = ctx.schedule
    if what is Input.STEPS:
        return any(step.launches for step in ctx.steps)
    if s is None:
        return False
    if what is Input.GPU:
        return s.gpu is not None
    if what is Input.THRESHOLDS:
        return bool(s.thresholds)
    if what is Input.SIDECAR:
        return any(b.source == "sidecar" and b.kv_lens for b in s.batches.values())
    if what is Input.SCHEDULE:
        return any(m.predicted_ns is not None for m in s.models.values())
    if what is Input.NCU:
        return bool(s.measured)
    if what is Input.SHAPE:
        return any(b.source == "sidecar" and b.qo_heads and b.kv_heads and b.head_dim for b in s.batches.values())
    if what is Input.BANDWIDTH:
        return s.gpu is not None and bool(s.gpu.hbm_bandwidth_bytes_per_s)
    raise AssertionError(what)


# Why an input is missing, and how to provide it.
MISSING: dict[Input, str] = {
    Input.STEPS: "no attention kernel launches were found in the trace",
    Input.GPU: "the GPU is unknown (not in the GPU table and the trace gives no device properties)",
    Input.THRESHOLDS: "no attention kernel of a backend the schedule model knows",
    Input.SIDECAR: "no batch composition (KV lengths per step): pass --meta SIDECAR",
    Input.SCHEDULE: "no simulated schedule: needs --meta SIDECAR with KV lengths and balanced launches to "
                    "calibrate the cost model",
    Input.NCU: "no Nsight Compute metrics matched to the launches: pass --ncu CSV (ncu --csv, details or raw page)",
    Input.SHAPE: "the model shape (heads, head_dim) is unknown: pass a sidecar that records it",
    Input.BANDWIDTH: "the GPU's peak HBM bandwidth is unknown",
}


def has(ctx: TraceAnalysis, what: Input) -> bool:
    """Whether the analysis provides `what`."""
    return _has(ctx, what)


class NotApplicable(Exception):
    """Raised by a rule that cannot judge this trace; the message is the reason."""


class RuleModule(Protocol):
    ID: str
    NAME: str
    DESCRIPTION: str
    PASSED: str
    NEEDS: tuple[Input, ...]
    OPTIONAL: tuple[Input, ...]
    apply: Callable[[TraceAnalysis], list[Finding]]


@dataclass(frozen=True)
class RuleResult:
    """What one rule did on one trace: status 'fired' | 'passed' | 'not-applicable', with the reason
    (not applicable) or the passed text, and how many findings it made."""

    id: str
    name: str
    status: str
    reason: str
    findings: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "status": self.status, "reason": self.reason,
                "findings": self.findings}


def missing_reason(rule: ModuleType | RuleModule, ctx: TraceAnalysis) -> str | None:
    """Why `rule` cannot run on `ctx` (its first missing need), or None when all needs are met."""
    for need in rule.NEEDS:
        if not has(ctx, need):
            return MISSING[need]
    return None


def limit(ctx: TraceAnalysis, rule_id: str, name: str, default: float) -> float:
    """A rule threshold: `ctx.limits["<rule_id>.<name>"]` when set, else the module constant `default`."""
    return float(ctx.limits.get(f"{rule_id}.{name}", default))
