"""The step timeline as the reports show it, read from the JSON document: every step with its spike flag and the
finding that explains the spike, each step's breakdown in four parts, and the latency-spike incidents one by one.
Times in ns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traceinsight.report.finding_order import GLOBAL_FINDINGS, SPIKE_ID, sorted_findings


@dataclass(frozen=True)
class TimelinePoint:
    """One step in the time series. `cause` is the id of the finding that explains a spike (None if none)."""

    index: int
    name: str
    start_ns: int
    dur_ns: int
    attention_ns: int
    split_kv: bool | None
    spike: bool
    cause: str | None


def _spike_causes(finding: dict[str, Any]) -> dict[int, str]:
    """Cause per spike step when the latency-spike finding names one in its evidence: `evidence.cause` (one
    id for all its steps), `evidence.causes` as {step: id} or [{step, cause}], or `evidence.spikes` as
    [{step, cause}]."""
    ev = finding.get("evidence") or {}
    out: dict[int, str] = {}
    if isinstance(ev.get("cause"), str):  # one cause for every step of this spike
        out.update({i: ev["cause"] for i in finding.get("steps") or []})
    raw = ev.get("causes")
    if isinstance(raw, dict):
        for k, v in raw.items():
            if str(k).lstrip("-").isdigit() and isinstance(v, str):
                out[int(k)] = v
    for key in ("causes", "spikes"):
        items = ev.get(key)
        if isinstance(items, list):
            for item in items:
                if isinstance(item, dict) and isinstance(item.get("step"), int):
                    cause = item.get("cause") or item.get("id")
                    if isinstance(cause, list):
                        cause = cause[0] if cause else None
                    if isinstance(cause, str):
                        out[item["step"]] = cause
    return out


def timeline(doc: dict[str, Any]) -> list[TimelinePoint]:
    """Every step with its spike flag and cause. A spike's cause is the one the latency-spike finding names,
    else the worst step-level finding that lists the step."""
    findings = sorted_findings(doc)
    spikes: set[int] = set()
    named: dict[int, str] = {}
    by_step: dict[int, str] = {}
    for f in findings:
        steps = f.get("steps") or []
        if f.get("id") == SPIKE_ID:
            spikes.update(steps)
            named.update(_spike_causes(f))
        elif f.get("id") not in GLOBAL_FINDINGS:
            for i in steps:
                by_step.setdefault(i, f["id"])  # findings are worst first
    out = []
    for s in doc.get("steps") or []:
        i = s["index"]
        spike = i in spikes
        out.append(TimelinePoint(i, s["name"], s["start_ns"], s.get("wall_ns", s["dur_ns"]), s["attention_ns"],
                                 s["split_kv"], spike,
                                 (named.get(i) or by_step.get(i)) if spike else None))
    return out


def spike_causes(doc: dict[str, Any]) -> dict[int, str]:
    """Cause per step of every latency-spike finding (onset steps included)."""
    out: dict[int, str] = {}
    for f in doc.get("findings") or []:
        if f.get("id") == SPIKE_ID:
            cause = (f.get("evidence") or {}).get("cause")
            for i in f.get("steps") or []:
                if cause:
                    out.setdefault(i, cause)
    return out


# Breakdown components shown apart in the steps tables; the rest of the GPU work is summed as "other GPU".
IDLE_COMPONENTS = ("idle-host", "idle-wait", "idle-unknown")


def breakdown_parts(b: dict[str, Any] | None) -> dict[str, int]:
    """A step breakdown in four parts (ns): attention (with prefill), other GPU work, GPU waiting for the host,
    other GPU idle."""
    comps = (b or {}).get("components") or {}
    attention = comps.get("attention", 0) + comps.get("prefill", 0)
    host = comps.get("idle-host", 0)
    other_idle = sum(comps.get(c, 0) for c in IDLE_COMPONENTS) - host
    other_gpu = sum(comps.values()) - attention - host - other_idle
    return {"attention": attention, "other_gpu": other_gpu, "host": host, "other_idle": other_idle}


@dataclass
class IncidentRow:
    """One latency-spike incident as the reports show it: its steps, cause, onset, worst step, and per
    component the mean time per step against its baseline (ns), largest growth first."""

    steps: list[int]
    cause: str
    onset: list[int]
    threshold_step: int | None
    worst_step: int
    worst_ns: int
    worst_baseline_ns: int
    ratio: float
    excess_ns: int
    parts: list[dict[str, Any]]
    remedy: str

    @property
    def label(self) -> str:
        lo, hi = self.steps[0], self.steps[-1]
        return f"step {lo}" if lo == hi else f"steps {lo}-{hi}"


def incident_rows(doc: dict[str, Any], limit: int = 12) -> list[IncidentRow]:
    """The latency-spike incidents reported one by one (not the folded ones), most excess time first."""
    out = []
    for f in doc.get("findings") or []:
        ev = f.get("evidence") or {}
        if f.get("id") != SPIKE_ID or ev.get("folded") or "attribution" not in ev:
            continue
        n = max(1, len(f.get("steps") or []))
        parts = [{**r, "step_ns": r["step_ns"] / n, "baseline_ns": r["baseline_ns"] / n,
                  "delta_ns": r["delta_ns"] / n} for r in ev["attribution"]]
        out.append(IncidentRow(list(f.get("steps") or []), ev.get("cause") or "unexplained",
                               list(ev.get("onset_steps") or []), ev.get("threshold_step"), ev["worst_step"],
                               ev["worst_dur_ns"], ev["worst_baseline_ns"], ev["worst_ratio"], ev["excess_ns"], parts,
                               f.get("remedy") or ""))
    out.sort(key=lambda r: -r.excess_ns)
    return out[:limit]


def parts_text(parts: list[dict[str, Any]], limit: int = 3) -> str:
    """'attention +12.1 ms (93%), idle-host +0.8 ms (6%)': the parts that grew, with their share of the excess."""
    from traceinsight.units import fmt_ns

    grown = [p for p in parts if p.get("attributed_ns", 0) > 0][:limit]
    return ", ".join(f"{p['component']} +{fmt_ns(p['delta_ns'])} ({100 * p['share']:.0f}%)" for p in grown) or "-"
