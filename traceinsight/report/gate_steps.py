"""The step groups of the regression gate: steps of one kind (name without numbers, phase, batch bucket, attention
backend) on each side, paired (or as a path change, new, gone), with their change and its causes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from traceinsight.report.gate_causes import COMPONENT_CAUSE_SHARE, components, spike_cause, split_cause
from traceinsight.report.gate_groups import (
    Thresholds,
    group_metrics,
    group_verdict,
    median_ns,
    ordered,
    path_text,
    signed_ms,
)
from traceinsight.report.gate_samples import STEP_METRICS, step_time
from traceinsight.report.pairing import step_kind


def _kind_json(k: tuple[str, str, str | None, str | None]) -> dict[str, Any]:
    return {"name": k[0], "phase": k[1], "batch_bucket": k[2], "backend": k[3]}


def _label(k: tuple[str, str, str | None, str | None]) -> str:
    b = f" B {k[2]}" if k[2] else ""
    return f"{k[0]} {k[1]}{b}" + (f" [{k[3]}]" if k[3] else "")


def _step_groups(doc: Mapping[str, Any]) -> dict[tuple[str, str, str | None, str | None], list[dict[str, Any]]]:
    out: dict[tuple[str, str, str | None, str | None], list[dict[str, Any]]] = defaultdict(list)
    for s in doc.get("steps") or []:
        out[step_kind(s)].append(s)
    return dict(out)


def step_groups(before_doc: Mapping[str, Any], after_doc: Mapping[str, Any], th: Thresholds) -> list[dict[str, Any]]:
    """Each step kind of either side: paired, a path change, new or gone; with metrics and causes when paired."""
    gb, ga = _step_groups(before_doc), _step_groups(after_doc)
    pairs: list[tuple[Any, Any, str]] = [(k, k, "paired") for k in gb if k in ga]
    only_b = [k for k in gb if k not in ga]
    only_a = [k for k in ga if k not in gb]
    for kb in list(only_b):  # the same steps on another attention path
        match = [ka for ka in only_a if ka[:3] == kb[:3]]
        if len(match) == 1 and len([k for k in only_b if k[:3] == kb[:3]]) == 1:
            pairs.append((kb, match[0], "path-change"))
            only_b.remove(kb)
            only_a.remove(match[0])
    rows: list[dict[str, Any]] = []
    for kb, ka, status in pairs:
        sb, sa = gb[kb], ga[ka]
        samples = {m: ([step_time(s, m) for s in sb], [step_time(s, m) for s in sa]) for m in STEP_METRICS}
        wb, wa = samples[th.step_metric]
        metrics = group_metrics(wb, wa, th, f"{_label(ka)} [{th.step_metric}]", f"steps-{th.step_metric}")
        other = next(m for m in STEP_METRICS if m != th.step_metric)
        info = group_metrics(*samples[other], th, f"{_label(ka)} [{other}]", f"steps-{other}")  # shown, not gated
        comps = [c for c in components(sb, sa)
                 if th.step_metric == "wall" or not c["component"].startswith("idle")]
        causes: list[dict[str, Any]] = []
        if status == "path-change":
            causes.append({"kind": "path-change", "text": f"attention path {path_text(kb[3])} -> {path_text(ka[3])}"})
        split = split_cause(sb, sa, after_doc, ka[3])
        if split:
            causes.append(split)
        spike = spike_cause(sb, sa, before_doc, after_doc)
        if spike:
            causes.append(spike)
        delta = median_ns(wa) - median_ns(wb)
        if comps and delta and comps[0]["delta_ns"] * delta > 0 and abs(comps[0]["delta_ns"]) >= (
                COMPONENT_CAUSE_SHARE * abs(delta)):
            c = comps[0]
            causes.append({"kind": "component", "component": c["component"],
                           "text": f"{c['component']} {'grew' if c['delta_ns'] > 0 else 'shrank'} by "
                                   f"{signed_ms(abs(c['delta_ns']))[1:]} per step (median)",
                           "per_step_ns": c["delta_ns"]})
        for c in causes:
            c.setdefault("per_step_ns", delta)
        rows.append({"group": _label(ka), "kind": _kind_json(ka), "before_kind": _kind_json(kb), "status": status,
                     "n_before": len(sb), "n_after": len(sa), "step_metric": th.step_metric, "metrics": metrics,
                     "verdict": group_verdict(metrics), "per_step_ns": delta, "components": comps[:4],
                     "causes": causes, "other_metric": other, "other_metrics": info,
                     "other_verdict": group_verdict(info)})
    for side, keys, groups in (("gone", only_b, gb), ("new", only_a, ga)):
        for k in keys:
            n = len(groups[k])
            rows.append({"group": _label(k), "kind": _kind_json(k), "before_kind": None, "status": side,
                         "n_before": n if side == "gone" else 0, "n_after": n if side == "new" else 0,
                         "metrics": None, "verdict": None, "per_step_ns": None, "components": [], "causes": []})
    return ordered(rows)
