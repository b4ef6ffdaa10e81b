"""The diff (`traceinsight.diff/1`, report/diff.py) as a self-contained HTML page in the report's style, laid out
by templates/diff.html.j2; with the two analysis documents, their latency against batch size and step timelines
side by side (report/diff_figures.py)."""

from __future__ import annotations

from typing import Any

from traceinsight import __version__
from traceinsight.report.diff_cells import metric_cell, signed_ns, split_pair
from traceinsight.units import fmt_ns


def _side(g: dict[str, Any] | None) -> dict[str, Any] | None:
    if g is None:
        return None
    return {"severity": g["severity"], "steps": g["steps"],
            "saving": fmt_ns(g["saving_ns"]) if g.get("saving_ns") else None}


def gate_view(g: dict[str, Any]) -> dict[str, Any]:
    """The regression gate: its summary and notes, the paired groups with their intervals, the unpaired ones."""
    groups = g["step_groups"] + g["kernel_groups"]
    return {"lines": g["summary"] + [f"note: {n}" for n in g["notes"]], "method": g["method"],
            "rows": [{"group": row["group"], "causes": row["causes"], "verdict": row["verdict"],
                      "verdict_text": row["verdict"] + (" (path change)" if row["status"] == "path-change" else ""),
                      "n_before": row["n_before"], "n_after": row["n_after"], "median": metric_cell(row, "median"),
                      "p90": metric_cell(row, "p90"), "per_step": signed_ns(row["per_step_ns"])}
                     for row in groups if row["metrics"]],
            "unpaired": "; ".join(f"{row['status']}: {row['group']}" for row in groups if not row["metrics"])}


def render_html(d: dict[str, Any], docs: tuple[dict[str, Any], dict[str, Any]] | None = None) -> str:
    """The diff as a self-contained HTML page (same style as the report); with the two analysis documents
    (`docs`: before, after), their latency against batch size and step timelines side by side."""
    from traceinsight.report.templating import render

    side_by_side = None
    if docs is not None:
        from traceinsight.report.diff_figures import side_by_side as figures

        side_by_side = figures(*docs, metric=d["gate"].get("step_metric") or "gpu")
    return render(
        "diff.html.j2", title="traceinsight diff", version=__version__, d=d, gate=gate_view(d["gate"]),
        side_by_side=side_by_side,
        findings=[{"id": f["id"], "status": f["status"], "before": _side(f["before"]), "after": _side(f["after"])}
                  for f in d["findings"]],
        kernels=[{**k, "before": k["before"] or {}, "after": k["after"] or {},
                  "split": split_pair(k).replace("->", "→")} for k in d["kernels"]],
        thresholds=[{**t, "before": t["before"] or {}, "after": t["after"] or {}} for t in d["thresholds"]])
