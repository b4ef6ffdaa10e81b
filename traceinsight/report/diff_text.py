"""A diff (`traceinsight.diff/1`, report/diff.py) printed with rich: headline, the regression gate's groups,
findings, attention kernels, families, thresholds."""

from __future__ import annotations

from typing import Any

from traceinsight.report.diff_cells import metric_cell, signed_ns, split_pair


def render_text(d: dict[str, Any], console: Any) -> None:
    """Print the diff with rich: headline, then families, kernels, thresholds, findings tables."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from traceinsight.units import fmt_ns

    style = {"new": "bold red", "gone": "green", "slower": "red", "faster": "green", "changed": "yellow",
             "same": "dim"}

    def table(title: str, cols: list[str], right: set[str]) -> Table:
        t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", title_style="bold", padding=(0, 1),
                  pad_edge=False, show_edge=False)
        for c in cols:
            t.add_column(c, justify="right" if c in right else "left")
        return t

    console.print(Text(f"before: {d['before']['path']}\nafter:  {d['after']['path']}", style="bold"))
    if d["summary"]:
        console.print()
        for line in d["summary"]:
            console.print(Text(f" • {line}"))
    g = d["gate"]
    console.print()
    console.print(Text("Regression gate", style="bold"))
    for line in g["summary"] + [f"note: {n}" for n in g["notes"]]:
        console.print(Text(f" • {line}"))
    gt = table("Step and kernel groups (paired by kind; change of median and p90 [95% CI])",
               ["group", "verdict", "n", "median", "p90", "per step", "cause"], {"n", "per step"})
    gt.columns[0].min_width = 36  # the group names the change; the numbers can wrap first
    gt.columns[0].overflow = "fold"
    for row in g["step_groups"] + g["kernel_groups"]:
        if not row["metrics"]:
            continue
        v = row["verdict"] + (" (path)" if row["status"] == "path-change" else "")
        gt.add_row(Text(row["group"]), Text(v, style=_VERDICT_STYLE.get(row["verdict"], "")),
                   f"{row['n_before']}->{row['n_after']}", *(Text(metric_cell(row, m)) for m in ("median", "p90")),
                   signed_ns(row["per_step_ns"]), Text("; ".join(c["text"] for c in row["causes"]) or "-"))
    ft = table("Findings", ["id", "status", "before", "after"], set())
    for f in d["findings"]:
        def side(g: dict[str, Any] | None) -> str:
            return "-" if g is None else f"{g['severity']}, {g['steps']} steps" + (
                f", saves {fmt_ns(g['saving_ns'])}" if g.get("saving_ns") else "")
        ft.add_row(f["id"], Text(f["status"], style=style.get(f["status"], "")), side(f["before"]), side(f["after"]))
    kt = table("Attention kernels", ["kernel", "backend", "status", "count", "mean", "total", "Δ total", "split-KV"],
               {"count", "mean", "total", "Δ total"})
    for k in d["kernels"]:
        b, a = k["before"] or {}, k["after"] or {}
        kt.add_row(k["kernel"], k["backend"] or "-", Text(k["status"], style=style.get(k["status"], "")),
                   f"{b.get('count', '-')} -> {a.get('count', '-')}",
                   f"{fmt_ns(b.get('mean_ns'))} -> {fmt_ns(a.get('mean_ns'))}",
                   f"{fmt_ns(b.get('total_ns'))} -> {fmt_ns(a.get('total_ns'))}", fmt_ns(k["delta_ns"]),
                   split_pair(k))
    famt = table("Kernel time by family", ["family", "backend", "status", "before", "after", "Δ"],
                 {"before", "after", "Δ"})
    for f in d["families"]:
        famt.add_row(f["family"], f["backend"] or "-", Text(f["status"], style=style.get(f["status"], "")),
                     fmt_ns(f["before_ns"]), fmt_ns(f["after_ns"]), fmt_ns(f["delta_ns"]))
    tt = table("Split-KV thresholds", ["kernel", "backend", "H_kv", "status", "CTAs/SM", "max grid", "B_th"],
               {"H_kv", "CTAs/SM", "max grid", "B_th"})
    for t in d["thresholds"]:
        b, a = t["before"] or {}, t["after"] or {}
        tt.add_row(str(t["kernel"]), t["backend"] or "-", str(t["kv_heads"]),
                   Text(t["status"], style=style.get(t["status"], "")),
                   *(f"{b.get(c) or '-'} -> {a.get(c) or '-'}" for c in ("occupancy", "max_grid", "b_threshold")))
    for t in (gt, ft, kt, famt, tt):
        if t.row_count:
            console.print()
            console.print(t)


_VERDICT_STYLE = {"regressed": "bold red", "improved": "green", "unchanged": "dim"}
