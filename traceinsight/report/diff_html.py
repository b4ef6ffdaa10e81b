"""A diff (`traceinsight.diff/1`, report/diff.py) as a self-contained HTML page, in the report's style."""

from __future__ import annotations

from typing import Any

from traceinsight.report.diff_cells import metric_cell, signed_ns, split_pair


def _gate_html(g: dict[str, Any]) -> str:
    from traceinsight.report.html import esc, table

    cls = {"regressed": "up", "improved": "down"}
    items = "".join(f"<li>{esc(line)}</li>" for line in g["summary"] + [f"note: {n}" for n in g["notes"]])
    rows = []
    for row in g["step_groups"] + g["kernel_groups"]:
        if not row["metrics"]:
            continue
        v = row["verdict"] + (" (path change)" if row["status"] == "path-change" else "")
        causes = "".join(f'<br><small>{esc(c["text"])}</small>' for c in row["causes"])
        rows.append([esc(row["group"]) + causes, f'<span class="{cls.get(row["verdict"], "")}">{esc(v)}</span>',
                     f"{row['n_before']} → {row['n_after']}", esc(metric_cell(row, "median")),
                     esc(metric_cell(row, "p90")), esc(signed_ns(row["per_step_ns"]))])
    unpaired = [f"{row['status']}: {row['group']}" for row in g["step_groups"] + g["kernel_groups"]
                if not row["metrics"]]
    more = ("<p>Without a partner: " + esc("; ".join(unpaired)) + "</p>") if unpaired else ""
    return ('<section data-section="gate"><h2>Regression gate</h2>'
            f'<ul>{items}</ul>' + (table([("group (cause)", ""), ("verdict", ""), ("n", "num"),
                                          ("median [95% CI]", "num"), ("p90 [95% CI]", "num"), ("per step", "num")],
                                         rows)
                                   if rows else '<p class="na">no group paired</p>')
            + more + f'<p class="caption">{esc(g["method"])}</p></section>')


def render_html(d: dict[str, Any], docs: tuple[dict[str, Any], dict[str, Any]] | None = None) -> str:
    """The diff as a self-contained HTML page (same style as the report); with the two analysis documents
    (`docs`: before, after), their latency against batch size and step timelines side by side."""
    from traceinsight.report.html import esc, page, table
    from traceinsight.units import fmt_ns

    cls = {"new": "up", "gone": "down", "slower": "up", "faster": "down", "changed": "up"}

    def st(s: str) -> str:
        return f'<span class="{cls.get(s, "")}">{esc(s)}</span>'

    def side(g: dict[str, Any] | None) -> str:
        if g is None:
            return "–"
        save = f", saves {fmt_ns(g['saving_ns'])}" if g.get("saving_ns") else ""
        return f'<span class="badge sev-{esc(g["severity"])}">{esc(g["severity"])}</span> {g["steps"]} steps{esc(save)}'

    parts = ['<header class="report"><h1>traceinsight diff</h1>'
             f'<p class="meta">before <b>{esc(d["before"]["path"])}</b> ({esc(d["before"]["gpu"])})<br>'
             f'after <b>{esc(d["after"]["path"])}</b> ({esc(d["after"]["gpu"])})</p></header>']
    items = "".join(f"<li>{esc(line)}</li>" for line in d["summary"]) or "<li>no change</li>"
    parts.append(f'<section data-section="summary"><h2>What changed</h2><ul>{items}</ul></section>')
    parts.append(_gate_html(d["gate"]))
    if docs is not None:
        from traceinsight.report.diff_figures import side_by_side_html

        parts.append(side_by_side_html(*docs, metric=d["gate"].get("step_metric") or "gpu"))
    rows = [[esc(f["id"]), st(f["status"]), side(f["before"]), side(f["after"])] for f in d["findings"]]
    parts.append('<section data-section="findings"><h2>Findings</h2>'
                 + (table([("id", "mono"), ("status", ""), ("before", ""), ("after", "")], rows) if rows
                    else '<p class="na">no finding on either side</p>') + "</section>")
    rows = []
    for k in d["kernels"]:
        b, a = k["before"] or {}, k["after"] or {}
        rows.append([esc(k["kernel"]), esc(k["backend"] or "–"), st(k["status"]),
                     f"{b.get('count', '–')} → {a.get('count', '–')}",
                     f"{esc(fmt_ns(b.get('mean_ns')))} → {esc(fmt_ns(a.get('mean_ns')))}",
                     f"{esc(fmt_ns(b.get('total_ns')))} → {esc(fmt_ns(a.get('total_ns')))}",
                     esc(split_pair(k).replace("->", "→"))])
    parts.append('<section data-section="kernels"><h2>Attention kernels</h2>' + table(
        [("kernel", ""), ("backend", ""), ("status", ""), ("count", "num"), ("mean", "num"), ("total", "num"),
         ("split-KV", "")], rows) + "</section>")
    rows = [[esc(f["family"]), esc(f["backend"] or "–"), st(f["status"]), esc(fmt_ns(f["before_ns"])),
             esc(fmt_ns(f["after_ns"])), esc(fmt_ns(f["delta_ns"]))] for f in d["families"]]
    parts.append('<section data-section="families"><h2>Kernel time by family</h2>' + table(
        [("family", ""), ("backend", ""), ("status", ""), ("before", "num"), ("after", "num"), ("Δ", "num")], rows)
        + "</section>")
    rows = []
    for t in d["thresholds"]:
        b, a = t["before"] or {}, t["after"] or {}
        rows.append([esc(t["kernel"]), esc(t["backend"] or "–"), esc(t["kv_heads"]), st(t["status"]),
                     *(f"{esc(b.get(c) or '–')} → {esc(a.get(c) or '–')}" for c in ("occupancy", "max_grid",
                                                                                   "b_threshold"))])
    parts.append('<section data-section="thresholds"><h2>Split-KV thresholds</h2>' + (table(
        [("kernel", ""), ("backend", ""), ("KV heads", "num"), ("status", ""), ("CTAs / SM", "num"),
         ("max grid", "num"), ("B_th", "num")], rows) if rows else '<p class="na">not available on either side: '
        "needs the schedule model's thresholds</p>") + "</section>")
    return page("traceinsight diff", "".join(parts))
