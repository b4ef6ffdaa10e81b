"""The dashboard's A/B view: the trace in the sidebar (before) against a second one (after), as `traceinsight diff`
compares them (report/diff.py, report/gate.py): the gate's verdict, the step and kernel groups with their change
and interval, latency against batch size overlaid and the step timelines aligned (report/diff_figures.py), and the
findings new / gone / changed. Attention kernels only: the dashboard's documents keep the steps' launches, not
every GEMM's times (the CLI's diff of two traces has those)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from traceinsight.report.diff import diff_docs
from traceinsight.report.diff_figures import latency_figure, timeline_figure
from traceinsight.report.gate_text import change_text


def _rows(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"group": g["group"], "verdict": g["verdict"] or g["status"], "status": g["status"],
             "n before": g["n_before"], "n after": g["n_after"], "change (median, p90) [95% CI]": change_text(g),
             "per step (us)": None if g["per_step_ns"] is None else round(g["per_step_ns"] / 1e3, 2),
             "cause": "; ".join(c["text"] for c in g["causes"]) or ""} for g in groups]


def page(before: dict[str, Any], after: dict[str, Any]) -> None:
    d = diff_docs(before, after)
    g = d["gate"]
    st.header("A/B: before vs after")
    st.caption(f"before {d['before']['path']} · after {d['after']['path']}")
    box = st.error if g["regressed"] else st.success if g["improved"] else st.info
    box("\n".join(f"- {line}" for line in g["summary"]))
    for n in g["notes"]:
        st.caption(n)
    st.subheader("Step groups")
    st.dataframe(_rows(g["step_groups"]), width="stretch", hide_index=True, key="ab_steps")
    st.subheader("Attention kernel groups")
    st.dataframe(_rows(g["kernel_groups"]), width="stretch", hide_index=True, key="ab_kernels")
    st.subheader("Side by side")
    metric = g["step_metric"]
    for fig in (latency_figure(before, after, metric), timeline_figure(before, after, metric)):
        if fig is not None:
            st.pyplot(fig, clear_figure=False)
    st.subheader("Findings")
    rows = [{"finding": f["id"], "status": f["status"],
             "before": "" if f["before"] is None else f"{f['before']['severity']}, {f['before']['steps']} steps",
             "after": "" if f["after"] is None else f"{f['after']['severity']}, {f['after']['steps']} steps"}
            for f in d["findings"]]
    st.dataframe(rows, width="stretch", hide_index=True, key="ab_findings")
    st.caption(g["method"])
