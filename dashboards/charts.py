"""Interactive (Vega-Lite, via Altair) versions of the report's plots for the dashboard, built from the same
data as the static report (`traceinsight.report.sections`, `figures.Gantt`). Times in ns, shown in ms."""

from __future__ import annotations

from typing import Any

import altair as alt

from traceinsight.model.sweep import SweepPanel
from traceinsight.report.figures import (
    BASE,
    BUSY,
    CAUSE_COLOURS,
    CAUSE_OTHER,
    COMPONENT_COLOURS,
    COMPONENT_OTHER,
    DIST_COLOURS,
    TAIL,
    Gantt,
)
from traceinsight.report.timeline import TimelinePoint

# Name of the click selection on the timeline; the app reads the clicked step index from it.
STEP_SELECTION = "step"
# Above this many marks Vega-Lite in a browser gets slow: the Gantt then shows each SM's busy time instead of
# every work item.
MAX_GANTT_MARKS = 6000


def timeline_chart(points: list[TimelinePoint]) -> alt.LayerChart:
    """Step time per step; spikes coloured by cause; click a point to select the step."""
    rows = [{"step": p.index, "name": p.name, "ms": p.dur_ns / 1e6, "attention_ms": p.attention_ns / 1e6,
             "split_kv": {True: "on", False: "off"}.get(p.split_kv, "?"),
             "cause": (p.cause or "unexplained") if p.spike else "within trend"} for p in points]
    causes = sorted({r["cause"] for r in rows} - {"within trend"})
    domain = ["within trend", *causes]
    colours = [BASE, *[CAUSE_COLOURS.get(c, CAUSE_OTHER) for c in causes]]
    data = alt.Data(values=rows)
    lo = min((r["ms"] for r in rows), default=1)
    hi = max((r["ms"] for r in rows), default=1)
    yscale = alt.Scale(type="log") if lo > 0 and hi / lo > 12 else alt.Scale(zero=False)
    pick = alt.selection_point(name=STEP_SELECTION, fields=["step"], on="click", clear="dblclick", nearest=True)
    base = alt.Chart(data).encode(
        x=alt.X("step:Q", title="step (trace order)"),
        y=alt.Y("ms:Q", title="step time (ms)", scale=yscale),
    )
    line = base.mark_line(color=BASE, strokeWidth=0.8)
    dots = base.mark_circle().encode(
        color=alt.Color("cause:N", scale=alt.Scale(domain=domain, range=colours), title="spike cause"),
        size=alt.condition(pick, alt.value(140), alt.value(16), empty=False),
        tooltip=["step:Q", "name:N", alt.Tooltip("ms:Q", format=".3f", title="step ms"),
                 alt.Tooltip("attention_ms:Q", format=".3f", title="attention ms"), "split_kv:N", "cause:N"],
    ).add_params(pick)
    return (line + dots).properties(height=300)


def breakdown_chart(explanation: dict[str, Any]) -> alt.Chart:
    """One step against its baseline: two horizontal bars stacked by component (ms)."""
    rows = []
    for p in explanation["attribution"]:
        for which, key in (("baseline", "baseline_ns"), (f"step {explanation['step']}", "step_ns")):
            if p[key] > 0:
                rows.append({"bar": which, "component": p["component"], "ms": p[key] / 1e6,
                             "delta_ms": p["delta_ns"] / 1e6})
    names = [p["component"] for p in explanation["attribution"] if p["step_ns"] > 0 or p["baseline_ns"] > 0]
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("bar:N", title=None, sort=["baseline"]),
        x=alt.X("ms:Q", title="time (ms)", stack="zero"),
        color=alt.Color("component:N", scale=alt.Scale(domain=names, range=[COMPONENT_COLOURS.get(n, COMPONENT_OTHER)
                                                                            for n in names])),
        order=alt.Order("component:N"),
        tooltip=["component:N", alt.Tooltip("ms:Q", format=".3f"), alt.Tooltip("delta_ms:Q", format="+.3f",
                                                                               title="change ms")],
    ).properties(height=alt.Step(30))  # a band per bar: a fixed height was squashed in the stretched container


def sweep_chart(panels: list[SweepPanel]) -> alt.HConcatChart:
    """Latency vs batch size per distribution, one panel per sweep, B_th as a dashed rule."""
    dists: list[str] = []
    for p in panels:
        for s in p.series:
            if s.dist not in dists:
                dists.append(s.dist)
    colour = alt.Scale(domain=dists, range=[DIST_COLOURS[i % len(DIST_COLOURS)] for i in range(len(dists))])
    charts = []
    for p in panels:
        rows = [{"batch": b, "ms": ns / 1e6, "dist": s.dist, "split_kv": "off" if off else "on"}
                for s in p.series for b, ns, off in zip(s.batch, s.median_ns, s.split_off, strict=True)]
        base = alt.Chart(alt.Data(values=rows)).encode(
            x=alt.X("batch:Q", scale=alt.Scale(type="log", base=2), title="batch size (requests)"),
            y=alt.Y("ms:Q", scale=alt.Scale(type="log"), title="attention time per step (ms)"),
            color=alt.Color("dist:N", scale=colour, title="distribution"),
        )
        layer = base.mark_line(point=True).encode(
            tooltip=["dist:N", "batch:Q", alt.Tooltip("ms:Q", format=".3f"), "split_kv:N"])
        title = f"{p.key}: {p.kernel}" if p.kernel else p.key
        if p.b_threshold:
            rule_data = alt.Data(values=[{"batch": p.b_threshold, "label": f"B_th = {p.b_threshold}"}])
            rule = alt.Chart(rule_data).mark_rule(strokeDash=[6, 4], color="#333333").encode(x="batch:Q")
            text = alt.Chart(rule_data).mark_text(align="right", dx=-4, dy=8, fontWeight="bold").encode(
                x="batch:Q", y=alt.value(0), text="label:N")
            layer = layer + rule + text
        charts.append(layer.properties(title=title, width=360 if len(panels) > 1 else 720, height=300))
    return alt.hconcat(*charts).configure_legend(orient="bottom", direction="horizontal")


def gantt_chart(g: Gantt) -> alt.VConcatChart:
    """Busy-SM count over time above one row per SM; each work item a bar (the tail in red), with tooltips."""
    from traceinsight.report.figures import _union, busy_curve

    slots = max(1, g.slots_per_sm)
    rows: list[dict[str, Any]] = []
    if len(g.segments) <= MAX_GANTT_MARKS:
        for s in g.segments:  # resident slots as thin lanes; the tail over the whole row, so it stands out
            lane = (s.slot % slots) if s.slot is not None and not s.tail else 0
            h = 1 / slots if s.slot is not None and not s.tail else 1
            rows.append({"sm": s.sm, "y0": s.sm + lane * h, "y1": s.sm + (lane + 0.95) * h,
                         "start_ms": s.start_ns / 1e6, "end_ms": s.end_ns / 1e6,
                         "kind": "tail" if s.tail else "work item", "item": s.label})
    else:
        per_sm: dict[int, list[tuple[float, float]]] = {}
        for s in g.segments:
            per_sm.setdefault(s.sm, []).append((s.start_ns, s.end_ns))
        for sm, ivs in per_sm.items():
            for a, b in _union(ivs):
                rows.append({"sm": sm, "y0": sm, "y1": sm + 0.9, "start_ms": a / 1e6, "end_ms": b / 1e6,
                             "kind": "work item", "item": "busy"})
        rows += [{"sm": s.sm, "y0": s.sm, "y1": s.sm + 0.9, "start_ms": s.start_ns / 1e6, "end_ms": s.end_ns / 1e6,
                  "kind": "tail", "item": s.label} for s in g.segments if s.tail]
    kinds = alt.Scale(domain=["work item", "tail"], range=[BUSY, TAIL])
    gantt = alt.Chart(alt.Data(values=rows)).mark_rect(opacity=0.85).encode(
        x=alt.X("start_ms:Q", title="time since launch start (ms)"),
        x2="end_ms:Q",
        y=alt.Y("y0:Q", title="SM", scale=alt.Scale(domain=[0, g.num_sms], reverse=True, nice=False)),
        y2="y1:Q",
        color=alt.Color("kind:N", scale=kinds, title=None),
        tooltip=["sm:Q", "item:N", alt.Tooltip("start_ms:Q", format=".4f"), alt.Tooltip("end_ms:Q", format=".4f"),
                 "kind:N"],
    ).properties(height=max(260, min(3 * g.num_sms, 520)))
    xs, ys = busy_curve(g)
    curve = alt.Chart(alt.Data(values=[{"t_ms": x / 1e6, "busy": y} for x, y in zip(xs, ys, strict=True)])).mark_area(
        interpolate="step-after", color=BUSY, opacity=0.45, line=True).encode(
        x=alt.X("t_ms:Q", title=None), y=alt.Y("busy:Q", title="SMs busy", scale=alt.Scale(domain=[0, g.num_sms])),
    ).properties(height=90)
    return alt.vconcat(curve, gantt).resolve_scale(x="shared")
