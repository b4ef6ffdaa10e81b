"""A self-contained HTML report: inline CSS, plots as inline SVG, no script and no URL, so it opens offline and
can be attached to a postmortem. Sections, in order: verdict, step timeline, latency vs batch size, simulated
per-SM schedule, kernels, thresholds, methods (`SECTIONS`).

This module builds each section's view (plain values, from `report.sections`); the Jinja templates in
`report/templates/` lay them out (report.html.j2, its sections in report_sections.html.j2), autoescaped
(`report.templating`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from traceinsight import __version__
from traceinsight.report import sections
from traceinsight.report.finding_order import SPIKE_ID
from traceinsight.report.kernel_tables import (
    SPREAD_COLUMNS,
    grids_text,
    kernel_rows,
    params_text,
    spread_cells,
    threshold_rows,
)
from traceinsight.report.notes import checks, checks_line, methods, missing
from traceinsight.report.sweep_view import MAX_SWEEP_PANELS, observed_switch, observed_switches, plotted_panels, sweep
from traceinsight.report.timeline import incident_rows, parts_text, timeline
from traceinsight.units import fmt_ns

if TYPE_CHECKING:  # matplotlib is imported only when a plot is drawn (diff pages need none)
    from markupsafe import Markup

    from traceinsight.report.figures import Gantt


def _figures() -> Any:
    """The plotting module (imports matplotlib on first use)."""
    from traceinsight.report import figures

    return figures


def _svg(fig: Any) -> Markup:
    from traceinsight.report.templating import trusted

    return trusted(_figures().to_svg(fig))


# (data-section id, heading), in report order.
SECTIONS = (
    ("verdict", "Verdict"),
    ("timeline", "Step timeline"),
    ("breakdown", "Where the time went"),
    ("sweep", "Latency vs batch size"),
    ("schedule", "Simulated per-SM schedule"),
    ("kernels", "Kernels"),
    ("thresholds", "Split-KV thresholds"),
    ("methods", "How every number was obtained"),
)

# Evidence values longer than this are cut (the JSON has them whole).
EVIDENCE_CHARS = 300


def _evidence(ev: dict[str, Any]) -> list[tuple[str, str]]:
    items = []
    for k, v in ev.items():
        text = v if isinstance(v, str) else json.dumps(v, default=str)
        if len(text) > EVIDENCE_CHARS:
            text = text[:EVIDENCE_CHARS] + " …"
        items.append((k, text))
    return items


def _step_list(doc: dict[str, Any], steps: list[int], limit: int = 8) -> dict[str, Any]:
    names = {s["index"]: s["name"] for s in doc.get("steps") or []}
    return {"shown": [(i, names.get(i, "?")) for i in steps[:limit]], "more": max(0, len(steps) - limit)}


def _finding(doc: dict[str, Any], f: dict[str, Any]) -> dict[str, Any]:
    """One finding in a list: its severity, its id (the `ref` that names it among its rule's findings, e.g.
    latency-spike#3, else the rule id), its summary, its saving and its steps."""
    steps = list(f.get("steps") or [])
    return {"severity": f.get("severity") or "info", "ref": f.get("ref") or f.get("id"), "summary": f.get("summary"),
            "saving": fmt_ns(f["saving_ns"]) if f.get("saving_ns") else None, "nsteps": len(steps),
            "steps": _step_list(doc, steps) if steps else None}


def checks_view(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The rules that ran and did not fire, with the reason (passed, or not applicable and what they need)."""
    line = checks_line(doc)
    if line is None:
        return None
    _, rows = checks(doc)
    return {"line": line, "rows": [c for c in rows if c.get("status") != "fired"]}


def verdict_view(doc: dict[str, Any]) -> dict[str, Any]:
    """One line per root cause, worst first, with its saving; the details (explanation, remedy, every finding of
    the root cause and every finding that is its evidence, each by its id with its steps) folded under it."""
    why = missing(doc, "findings")
    groups = []
    for g in [] if why else sections.finding_groups(doc):
        first = g.findings[0]
        groups.append({
            "severity": g.severity, "id": g.id, "summary": g.summary,
            "saving": fmt_ns(g.saving_ns) if g.saving_ns else None, "share": g.share(doc) if g.saving_ns else "",
            "evidence_text": g.evidence_text(), "explanation": first.get("explanation"), "remedy": first.get("remedy"),
            "findings": [_finding(doc, f) for f in g.findings], "related": [_finding(doc, f) for f in g.related],
            "nsteps": len(g.steps), "steps": _step_list(doc, g.steps) if g.steps else None,
            "evidence": _evidence(first.get("evidence") or {})})
    return {"why": why, "groups": groups, "savings": "" if why else sections.savings_line(doc),
            "checks": checks_view(doc)}


def timeline_view(doc: dict[str, Any]) -> dict[str, Any]:
    why = missing(doc, "steps")
    if why:
        return {"why": why}
    points = timeline(doc)
    spikes = sum(p.spike for p in points)
    fig = _figures().timeline_figure(points, title=f"Step time of {len(points)} steps")
    if not doc.get("findings") and not doc.get("checks"):
        note = "Spikes: not available: needs the diagnostics stage (its latency-spike rule)."
    elif not any(f.get("id") == SPIKE_ID for f in doc.get("findings") or []):
        note = "No spike: no step broke from the trend (latency-spike found nothing)."
    else:
        note = f"{spikes} spikes marked, coloured by the finding that explains them; grey: steps within the trend."
    return {"why": None, "svg": _svg(fig), "note": note}


def breakdown_view(doc: dict[str, Any]) -> dict[str, Any]:
    why = missing(doc, "steps")
    if why:
        return {"why": why}
    rows = incident_rows(doc)
    if not rows:
        return {"why": "No latency spike to attribute (each step's breakdown is in the JSON: steps[].breakdown)."}
    return {"why": None, "svg": _svg(_figures().breakdown_figure(rows)), "rows": [
        {"label": r.label, "cause": r.cause, "onset": r.onset[0] if r.onset else None,
         "threshold_step": r.threshold_step, "worst": fmt_ns(r.worst_ns), "baseline": fmt_ns(r.worst_baseline_ns),
         "ratio": f"{r.ratio:.1f}", "grew": parts_text(r.parts), "remedy": r.remedy} for r in rows]}


def sweep_view(doc: dict[str, Any]) -> dict[str, Any]:
    panels = sweep(doc)
    if not panels:
        return {"why": missing(doc, "sweep") or ""}
    shown = []
    for p in panels:
        last_on, first_off = observed_switch(p)
        shown.append({"key": p.key, "threshold": p.threshold_text,
                      "observed": (f"split-KV observed on up to B={last_on}, off from B={first_off}" if first_off
                                   else "split-KV state does not change with B")})
    return {"why": None, "svg": _svg(_figures().sweep_figure(plotted_panels(panels))), "panels": shown,
            "drawn": MAX_SWEEP_PANELS if len(panels) > MAX_SWEEP_PANELS else None}


def schedule_view(sched: Gantt | str | None) -> dict[str, Any]:
    if sched is None or isinstance(sched, str):
        return {"why": sched or "not available: needs the schedule model (traceinsight.model.simulate) and a batch "
                "composition"}
    return {"why": None, "svg": _svg(_figures().gantt_figure(sched)), "title": sched.title, "notes": sched.notes}


def kernels_view(doc: dict[str, Any], limit: int = 40) -> dict[str, Any]:
    rows = kernel_rows(doc, limit)
    if not rows:
        return {"why": "not available: no kernel in the trace"}
    total = len(doc.get("kernels") or [])
    return {"why": None, "spread_headers": [(c, "num") for c in SPREAD_COLUMNS],
            "more": total - len(rows) if total > len(rows) else None, "rows": [
                {"name": k.get("name"), "kernel": k.get("kernel"), "family": k.get("family"),
                 "backend": k.get("backend") or "–", "phase": k.get("phase"), "phase_evidence": k.get("phase_evidence"),
                 "count": k.get("count"), "total": fmt_ns(k.get("total_ns")), "mean": fmt_ns(k.get("mean_ns")),
                 "spread": spread_cells(k), "share": f"{(k.get('share') or 0):.1%}",
                 "grids": grids_text(k.get("grids")), "params": params_text(k.get("params"))}
                for k in rows]}


def thresholds_view(doc: dict[str, Any]) -> dict[str, Any]:
    why = missing(doc, "thresholds")
    if why:
        return {"why": why}
    observed = observed_switches(doc)
    return {"why": None, "rows": [
        {"name": t.get("name"), "kernel": t.get("kernel"), "variants": t.get("variants") or 1,
         "backend": t.get("backend") or "–", "shape": t.get("shape"), "kv_heads": t.get("kv_heads"),
         "occupancy": t.get("occupancy"), "max_grid": t.get("max_grid"), "b_threshold": t.get("b_threshold"),
         "observed": observed.get((t.get("kernel"), t.get("backend")), "–")} for t in threshold_rows(doc)]}


def methods_view(doc: dict[str, Any]) -> dict[str, Any]:
    return {"rows": methods(doc)}


def header_view(doc: dict[str, Any]) -> dict[str, Any]:
    tr = doc.get("trace") or {}
    gpu = tr.get("gpu") or {}
    return {"path": tr.get("path"),
            "format": (tr.get("format") or "?") + (f" {tr['format_version']}" if tr.get("format_version") else ""),
            "gpu": (gpu.get("name") or "unknown GPU") + (f", {gpu['num_sms']} SMs" if gpu.get("num_sms") else ""),
            "span": fmt_ns(tr.get("dur_ns")), "kernels": sum(k.get("count") or 0 for k in doc.get("kernels") or []),
            "steps": len(doc.get("steps") or []), "in_steps": fmt_ns(sections.total_step_ns(doc)),
            "warnings": tr.get("warnings") or []}


# The view of each section but the schedule (which comes with the trace's Gantt), by section id.
VIEWS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "verdict": verdict_view, "timeline": timeline_view, "breakdown": breakdown_view, "sweep": sweep_view,
    "kernels": kernels_view, "thresholds": thresholds_view, "methods": methods_view,
}


def trace_view(doc: dict[str, Any], sched: Gantt | str | None, prefix: str = "") -> dict[str, Any]:
    """One trace: its header and its sections' views (section id, heading, view), in report order."""
    return {"name": ((doc.get("trace") or {}).get("path") or "?").rsplit("/", 1)[-1], "prefix": prefix,
            "header": header_view(doc),
            "sections": [(sid, heading, schedule_view(sched) if sid == "schedule" else VIEWS[sid](doc))
                         for sid, heading in SECTIONS]}


def verdict_html(doc: dict[str, Any]) -> str:
    """The verdict section's HTML alone."""
    from traceinsight.report.templating import macros

    return str(macros("report_sections.html.j2").verdict(verdict_view(doc)))


def render(docs: list[dict[str, Any]], schedules: Sequence[Gantt | str | None] | None = None) -> str:
    """The HTML report of one or more analysis documents (`report.saved.document`). `schedules[i]` is the
    Gantt of trace i (a Gantt), or the reason there is none. Several documents: each trace after the other, the
    ranks of a distributed run together first (docs/MULTIRANK.md)."""
    from traceinsight.report.run_html import runs_view
    from traceinsight.report.templating import render as render_template

    schedules = schedules or [None] * len(docs)
    if len(docs) == 1:
        name = (docs[0].get("trace") or {}).get("path") or "trace"
        title = f"traceinsight: {name.rsplit('/', 1)[-1]}"
        traces = [trace_view(docs[0], schedules[0])]
        runs: list[dict[str, Any]] = []
    else:
        title = f"traceinsight: {len(docs)} traces"
        traces = [trace_view(d, s, prefix=f"t{i}-") for i, (d, s) in enumerate(zip(docs, schedules, strict=True))]
        runs = runs_view(docs)
    return render_template("report.html.j2", title=title, version=__version__, sections=SECTIONS, traces=traces,
                           runs=runs)
