"""The dashboard's fleet page (`traceinsight dashboard --fleet DIR`): the report of `traceinsight fleet report`
(`traceinsight.fleet.report.build`) on a fleet dataset: the overview, the root causes across traces, the time
lost per trace as a bar chart, every trace with its figures, the worst steps, the outliers and the traces that
failed. A trace's own reports (HTML, JSON) can be downloaded from the page: a browser does not follow links from
a served page into local files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import altair as alt
import streamlit as st

from traceinsight.fleet.render import causes_text, rule_share, trace_share
from traceinsight.fleet.report import build, trace_link
from traceinsight.units import fmt_ns

FLEET_ENV = "TRACEINSIGHT_DASHBOARD_FLEET"
# Traces drawn in the time-lost chart (the costliest).
CHART_TRACES = 40


@st.cache_data(show_spinner=False, max_entries=4, ttl=60)
def load(root: str, top: int) -> dict[str, Any]:
    """The fleet report of the dataset (re-read at most every minute: `fleet analyze` may be adding to it)."""
    return build(Path(root), top)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def lost_chart(doc: dict[str, Any]) -> alt.Chart:
    """Time lost per trace (ms), one bar per trace, stacked by root cause; costliest traces first."""
    rows = [{"trace": t["trace"], "root cause": c["rule_id"], "ms": c["lost_ns"] / 1e6}
            for t in doc["traces"][:CHART_TRACES] for c in t["root_causes"] if c["lost_ns"]]
    order = [t["trace"] for t in doc["traces"][:CHART_TRACES] if t["lost_ns"]]
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("trace:N", sort=order, title=None, axis=alt.Axis(labelLimit=320)),
        x=alt.X("sum(ms):Q", title="time lost (ms)"),
        color=alt.Color("root cause:N", title="root cause", legend=alt.Legend(orient="bottom", columns=4)),
        tooltip=["trace:N", "root cause:N", alt.Tooltip("ms:Q", format=".3f", title="time lost (ms)")],
    ).properties(height=alt.Step(24))  # a band per trace, whatever the container's height


def page(root: Path) -> None:
    """The whole fleet page."""
    from traceinsight.errors import TraceInsightError

    top = int(st.sidebar.number_input("Worst steps listed", min_value=1, max_value=500, value=20, step=5,
                                      key="fleet_top"))
    try:
        doc = load(str(root), top)
    except TraceInsightError as exc:
        st.error(f"Cannot read the fleet dataset: {str(exc).splitlines()[0]}")
        return
    ov = doc["overview"]
    st.title("traceinsight fleet")
    st.caption(f"{doc['dataset']['path']} · updated {doc['dataset'].get('updated') or '?'} · "
               + (", ".join(f"{g['name']} ×{g['traces']}" for g in ov["gpus"]) or "no GPU"))
    cols = st.columns(5)
    cols[0].metric("traces analyzed", f"{ov['ok']} of {ov['traces']}")
    cols[1].metric("failed / pending", f"{ov['error']} / {ov['pending']}")
    cols[2].metric("steps", ov["steps"])
    cols[3].metric("wall time in steps", fmt_ns(ov["steps_wall_ns"]))
    cols[4].metric("time lost", fmt_ns(ov["lost_ns"]))
    st.caption("Time lost: the root causes' savings, each bounded step by step by the time it comes from (the "
               f"steps' wall time: {fmt_ns(ov['lost_steps_ns'])}, or the time between steps: "
               f"{fmt_ns(ov['lost_between_ns'])}).")

    st.header("Root causes")
    if doc["root_causes"]:
        st.dataframe([{"severity": r["severity"], "rule": r["rule_id"], "traces": r["traces"],
                       "share of traces": _pct(r["share_of_traces"]), "steps": r["steps"],
                       "time lost": fmt_ns(r["lost_ns"]), "time lost ms": r["lost_ns"] / 1e6,
                       "of fleet time": rule_share(r, ov), "worst trace": r["worst_trace"],
                       "its loss": fmt_ns(r["worst_trace_lost_ns"])} for r in doc["root_causes"]],
                     hide_index=True, width="stretch")
    else:
        st.success("No finding in any analyzed trace.")
    if doc["evidence_only"]:
        st.caption("Fired only as evidence of other root causes: " + ", ".join(
            f"{r['rule_id']} ({r['traces']} trace{'' if r['traces'] == 1 else 's'})" for r in doc["evidence_only"]))

    st.header("Traces")
    if doc["traces"]:
        st.altair_chart(lost_chart(doc), key="fleet_lost_chart", width="stretch")
        st.dataframe([{"trace": t["trace"], "gpu": t.get("gpu"), "steps": t.get("steps"),
                       "p50 step": fmt_ns(t.get("step_p50_ns")), "p99 step": fmt_ns(t.get("step_p99_ns")),
                       "time lost": fmt_ns(t["lost_ns"]), "of its time": _pct(trace_share(t)),
                       "root causes": causes_text(t, limit=8), "report": trace_link(t)} for t in doc["traces"]],
                     hide_index=True, width="stretch")
        reports(root, doc)
    else:
        st.info("No analyzed trace in this dataset.")

    st.header("Worst steps")
    st.dataframe([{"trace": w["trace"], "step": w["step"], "name": w.get("name"), "time": fmt_ns(w["dur_ns"]),
                   "×median": None if w.get("ratio") is None else round(w["ratio"], 1),
                   "wall": fmt_ns(w.get("wall_ns")), "findings": ", ".join(w["findings"])}
                  for w in doc["worst_steps"]], hide_index=True, width="stretch")
    st.caption("Time: GPU span of the step's kernels; ×median: against its trace's median step; wall: what the "
               "engine waited for it. `traceinsight explain TRACE --step N` explains one step.")

    st.header("Outliers")
    for f in doc["outliers"]:
        (st.error if f["severity"] == "critical" else st.warning)(f"**{f['id']}** — {f['summary']}")
    if not doc["outliers"]:
        st.caption("No trace stands out from the others on its GPU.")

    st.header("Not analyzed")
    if doc["failed"]:
        st.dataframe([{"trace": f["trace"], "status": f["status"], "source": f.get("source"),
                       "error": f.get("error")} for f in doc["failed"]], hide_index=True, width="stretch")
    else:
        st.caption("Every trace was analyzed.")


def reports(root: Path, doc: dict[str, Any]) -> None:
    """Download a trace's own reports (DIR/reports/<trace>.html|json)."""
    names = [t["trace"] for t in doc["traces"] if t.get("report")]
    if not names:
        return
    name = st.selectbox("A trace's own report", names, key="fleet_trace")
    t = next(x for x in doc["traces"] if x["trace"] == name)
    cols = st.columns(len(t["report"]))
    for col, (fmt, rel) in zip(cols, sorted(t["report"].items()), strict=True):
        path = root / rel
        if path.is_file():
            col.download_button(f"{Path(rel).name}", path.read_bytes(), file_name=Path(rel).name,
                                mime="text/html" if fmt == "html" else "application/json",
                                key=f"fleet_download_{fmt}")
