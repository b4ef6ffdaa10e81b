"""Many traces at once: one summary row per trace, and findings across traces (outliers against the fleet).

`fleet_summary(analyses)` turns the analyses of `pipeline.analyze` into rows (plain dicts, times in ns) that the
CLI prints as a table or JSON; `fleet_findings(rows)` compares each trace with the median of the traces that ran
on the same GPU, with the comparisons held as data in `FLEET_RULES`.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceinsight.diagnose.finding import severity_rank

if TYPE_CHECKING:
    import numpy as np

    from traceinsight.diagnose.context import TraceAnalysis

# Columns of a summary row, in display order (units in the names).
COLUMNS = (
    "trace", "path", "format", "gpu", "kernels", "kernel_ns", "attention_share", "steps", "split_kv_on",
    "split_kv_off", "split_kv_off_share", "step_p50_ns", "step_p99_ns", "step_max_ns", "slowest_step", "critical",
    "warnings", "infos", "top_finding",
)


def _percentile(ordered: np.ndarray, q: float) -> int | None:
    """Nearest-rank percentile (q in 0..1) of these values in ascending order, None when empty."""
    if not len(ordered):
        return None
    return int(ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))])


def summary_row(a: TraceAnalysis, step_durs: Sequence[int] | np.ndarray | None = None,
                split: Counter[bool | None] | None = None) -> dict[str, Any]:
    """One trace as a row of COLUMNS. `step_durs`, `split`: the steps' dur_ns and how many have each split_kv,
    when the caller has them as columns (`report.step_columns`)."""
    import numpy as np

    durs = np.asarray([s.dur_ns for s in a.steps] if step_durs is None else step_durs, np.int64)  # 10^6 steps
    if split is None:
        split = Counter(s.split_kv for s in a.steps)  # once per step: each asks every launch of the step
    ordered = np.sort(durs)
    slowest = a.steps[int(np.argmax(durs))] if len(durs) else None  # the first of the longest
    severities = Counter(str(getattr(f, "severity", "")) for f in a.findings)
    top = a.findings[0] if a.findings else None
    return {
        "trace": Path(a.path).name,
        "path": a.path,
        "format": a.format,
        "gpu": a.gpu.get("name"),
        "kernels": sum(int(k.get("count") or 0) for k in a.kernels),
        "kernel_ns": sum(int(k.get("total_ns") or 0) for k in a.kernels),
        "attention_share": sum(float(f.get("share") or 0.0) for f in a.families if f.get("family") == "attention"),
        "steps": len(a.steps),
        "split_kv_on": split[True],
        "split_kv_off": split[False],
        "split_kv_off_share": (split[False] / len(a.steps)) if a.steps else None,
        "step_p50_ns": _percentile(ordered, 0.5),
        "step_p99_ns": _percentile(ordered, 0.99),
        "step_max_ns": int(ordered[-1]) if len(ordered) else None,
        "slowest_step": slowest.name if slowest else None,
        "critical": severities.get("critical", 0),
        "warnings": severities.get("warning", 0),
        "infos": severities.get("info", 0),
        "top_finding": getattr(top, "id", None),
    }


def fleet_summary(analyses: list[TraceAnalysis]) -> list[dict[str, Any]]:
    """One row per trace (see COLUMNS), in the order of `analyses`; trace names made unique."""
    return unique_names([summary_row(a) for a in analyses])


def unique_names(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Summary rows whose file names repeat named by their paths instead (in place; returns `rows`)."""
    seen: Counter[str] = Counter(r["trace"] for r in rows)
    for r in rows:
        if seen[r["trace"]] > 1:
            r["trace"] = r["path"]
    return rows


@dataclass(frozen=True)
class FleetRule:
    """Flag a trace whose `metric` exceeds `factor` x the median of its GPU group (and `floor`), when the group
    has at least `min_traces` traces with the metric."""

    id: str
    severity: str
    metric: str
    factor: float
    floor: float
    summary: str  # formatted with trace, value, median, ratio, gpu
    min_traces: int = 3


FLEET_RULES: tuple[FleetRule, ...] = (
    FleetRule("fleet-slow-steps", "warning", "step_p50_ns", 1.5, 0,
              "{trace}: median step {value_ms:.2f} ms is {ratio:.1f}x the fleet median {median_ms:.2f} ms on {gpu}"),
    FleetRule("fleet-step-tail", "warning", "step_p99_ns", 2.0, 0,
              "{trace}: p99 step {value_ms:.2f} ms is {ratio:.1f}x the fleet's {median_ms:.2f} ms on {gpu}"),
    FleetRule("fleet-split-kv-off", "warning", "split_kv_off_share", 1.5, 0.05,
              "{trace}: {value:.0%} of steps ran with split-KV off, {ratio:.1f}x the fleet median {median:.0%} "
              "on {gpu}"),
    FleetRule("fleet-critical-findings", "critical", "critical", 1.0, 1,
              "{trace}: {value:.0f} critical findings where the fleet median is {median:.0f} on {gpu}"),
)


def fleet_findings(rows: list[dict[str, Any]], rules: tuple[FleetRule, ...] = FLEET_RULES) -> list[dict[str, Any]]:
    """Findings across traces: for each rule, the traces whose metric stands out from their GPU group's median.
    Each finding: id, severity, trace, summary, evidence (value, median, ratio, group size)."""
    out: list[dict[str, Any]] = []
    groups: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r.get("gpu"), []).append(r)
    for rule in rules:
        for gpu, members in groups.items():
            values = [r[rule.metric] for r in members if r.get(rule.metric) is not None]
            if len(values) < rule.min_traces:
                continue
            median = statistics.median(values)
            for r in members:
                v = r.get(rule.metric)
                if v is None or v < rule.floor or v <= rule.factor * median:
                    continue
                ratio = v / median if median else float("inf")
                out.append({
                    "id": rule.id,
                    "severity": rule.severity,
                    "trace": r["trace"],
                    "summary": rule.summary.format(trace=r["trace"], value=v, median=median, ratio=ratio,
                                                   value_ms=v / 1e6, median_ms=median / 1e6, gpu=gpu or "unknown GPU"),
                    "evidence": {rule.metric: v, "fleet_median": median, "ratio": ratio, "traces": len(values)},
                })
    out.sort(key=lambda f: (severity_rank(f["severity"]), -f["evidence"]["ratio"], f["trace"]))
    return out
