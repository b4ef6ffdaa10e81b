"""Terminal rendering of an analysis with rich: a header, the findings first (coloured by severity, one line
each with the saving and the remedy), then compact tables: thresholds, kernel time by family, attention
kernels, steps. Colour follows the console: none when stdout is not a TTY or NO_COLOR is set (rich honours
both). Everything is read from the JSON document (`report.saved`, the one builder), so the terminal shows what
JSON gives."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from traceinsight.report.console import fit
from traceinsight.units import fmt_ns

# Step names up to this many characters stay on one line in the steps table.
STEP_NAME_MIN_WIDTH = 48

SEVERITY_STYLE = {"critical": "bold red", "warning": "bold yellow", "info": "cyan"}


def _split(state: bool | None) -> Text:
    if state is True:
        return Text("on", style="green")
    if state is False:
        return Text("off", style="bold red")
    return Text("?", style="dim")


def _grid(g: tuple[int, int, int] | list[int | None]) -> str:
    """'(296,4,1)'; '' when the trace records no grid (ROCm traces: None, or 0 where a launch holds it)."""
    if not any(g):
        return ""
    return "(" + ",".join(str(x) for x in g) + ")"


def _table(title: str | None, columns: Sequence[tuple[str, str]]) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", title_style="bold", padding=(0, 1),
                  pad_edge=False, show_edge=False)
    for col, just in columns:
        table.add_column(col, justify=just, overflow="fold" if col in ("summary", "step") else "ellipsis")  # type: ignore[arg-type]
    return table


def header(doc: dict[str, Any], warnings: bool = True) -> Text:
    tr = doc.get("trace") or {}
    gpu = tr.get("gpu") or {}
    t = Text()
    t.append(str(tr.get("path")), style="bold")
    t.append(f"  [{tr.get('format')}" + (f" {tr['format_version']}" if tr.get("format_version") else "") + "]\n")
    name = gpu.get("name") or "unknown GPU"
    sms = f", {gpu['num_sms']} SMs" if gpu.get("num_sms") else ""
    kernels = doc.get("kernels") or []
    total = sum(k.get("total_ns") or 0 for k in kernels)
    count = sum(k.get("count") or 0 for k in kernels)
    t.append(f"GPU: {name}{sms}   span: {fmt_ns(tr.get('dur_ns'))}   kernels: {count} ({fmt_ns(total)} GPU time)")
    t.append(f"   steps: {len(doc.get('steps') or [])}")
    for w in (tr.get("warnings") or []) if warnings else []:
        t.append(f"\nwarning: {w}", style="yellow")
    return t


def findings_block(doc: dict[str, Any]) -> Table | Text:
    """One row per root cause, worst first: severity, id, the saving attributed to it (bounded by the time it
    comes from, with its share), its summary and the rules whose findings are its evidence; under a critical
    one its remedy. INFO rows keep to one line. The caption says what the savings add up to, against what, and
    how many rules were checked. Empty Text when the diagnostics reported nothing."""
    from traceinsight.report.notes import checks_line
    from traceinsight.report.sections import finding_groups, remedy_head, savings_line

    groups = finding_groups(doc)
    checked = checks_line(doc)
    if not groups:
        return Text(f"Findings: none ({checked})", style="bold green") if checked else Text()
    count = len(doc.get("findings") or [])
    table = Table.grid(padding=(0, 1), pad_edge=False)
    table.title = (f"Findings: {len(groups)} root cause{'s' if len(groups) != 1 else ''}"
                   + (f" ({count} findings, the others are their evidence)" if count > len(groups) else ""))
    table.title_justify = "left"
    table.title_style = "bold"
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True, justify="right")
    table.add_column(ratio=1)
    minor = [g for g in groups if g.minor(doc)]
    for g in groups:
        if g in minor:
            continue
        info = g.severity == "info"
        cell = Text(g.summary, no_wrap=info, overflow="ellipsis")
        if len(g.findings) > 1:
            cell.append(f" (+{len(g.findings) - 1} more)", style="dim")
        also = g.evidence_text()
        if also and not info:
            cell.append(f"\nalso: {also}", style="dim")
        remedy = g.findings[0].get("remedy")
        if g.severity == "critical" and remedy:
            cell.append(f"\n→ {remedy_head(remedy)}", style="dim")
        saving = Text("")
        if g.saving_ns:
            saving = Text(f"{fmt_ns(g.saving_ns)} {g.share(doc).split(' ')[0]}".rstrip(), style="bold")
        table.add_row(Text(g.severity.upper(), style=SEVERITY_STYLE.get(g.severity, "")), Text(g.id, style="bold"),
                      saving, cell)
    if minor:
        table.add_row(Text("INFO", style=SEVERITY_STYLE["info"]), Text(f"+{len(minor)} minor"), Text(""),
                      Text(", ".join(f"{g.id} ({fmt_ns(g.saving_ns)})" if g.saving_ns else g.id for g in minor),
                           style="dim", no_wrap=True, overflow="ellipsis"))
    caption = [c for c in (savings_line(doc), checked) if c]
    if caption:
        table.caption = "; ".join(caption)
        table.caption_justify = "left"
        table.caption_style = "dim"
    return table


def thresholds_table(doc: dict[str, Any]) -> Table | None:
    from traceinsight.report.kernel_tables import threshold_rows

    rows = threshold_rows(doc)
    if not rows:
        return None
    table = _table("Split-KV thresholds", [("kernel", "left"), ("backend", "left"), ("shape", "left"),
                                           ("H_kv", "right"), ("CTAs/SM", "right"), ("max grid", "right"),
                                           ("B_th", "right")])
    table.columns[2].overflow, table.columns[2].max_width = "fold", 44
    for r in rows:
        variants = f" ({r['variants']} variants)" if r.get("variants", 1) > 1 else ""
        table.add_row(str(r.get("kernel")) + variants, r.get("backend") or "-", r.get("shape") or "-",
                      str(r.get("kv_heads") or "-"),
                      str(r.get("occupancy") or "-"), str(r.get("max_grid") or "-"),
                      Text(str(r["b_threshold"]), style="bold") if r.get("b_threshold") else Text("-"))
    return table


def families_table(doc: dict[str, Any]) -> Table:
    table = _table("Kernel time by family / backend", [("family", "left"), ("backend", "left"), ("count", "right"),
                                                       ("time", "right"), ("share", "right")])
    for f in doc.get("families") or []:
        table.add_row(f["family"], f.get("backend") or "-", str(f["count"]), fmt_ns(f["total_ns"]),
                      f"{(f.get('share') or 0):.1%}")
    return table


def attention_kernels_table(doc: dict[str, Any]) -> Table:
    table = _table("Attention kernels", [("kernel", "left"), ("backend", "left"), ("phase", "left"),
                                         ("count", "right"), ("time", "right"), ("share", "right"),
                                         ("median", "right"), ("p90", "right"), ("p99", "right"),
                                         ("min", "right"), ("max", "right"), ("stddev", "right"),
                                         ("grids", "left")])
    rows = [k for k in doc.get("kernels") or [] if k["family"] in ("attention", "merge", "prepare")]
    table.columns[0].min_width = min(STEP_NAME_MIN_WIDTH, max((len(k["kernel"]) for k in rows), default=6))
    for k in rows:
        grids = k.get("grids") or []
        shown = " ".join(_grid(g) for g in grids[:3] if any(g)) + (" ..." if len(grids) > 3 else "")
        table.add_row(k["kernel"], k.get("backend") or "-", k["phase"], str(k["count"]), fmt_ns(k["total_ns"]),
                      f"{(k.get('share') or 0):.1%}", fmt_ns(k.get("median_ns")), fmt_ns(k.get("p90_ns")),
                      fmt_ns(k.get("p99_ns")), fmt_ns(k.get("min_ns")), fmt_ns(k.get("max_ns")),
                      fmt_ns(k.get("stddev_ns")), shown)
    return table


# Steps shown when no step has a finding (the table then only samples the series).
HEALTHY_SAMPLE = 10


def steps_shown(doc: dict[str, Any], limit: int | None) -> tuple[list[dict[str, Any]], int, int]:
    """The steps the table lists, and how many steps with findings and healthy steps it leaves out.

    The steps that matter come first: those a root cause tags (`sections.step_tags`), up to `limit` of them,
    taken a group at a time (each root cause's slowest steps first, so every cause shows), listed in step
    order. Healthy steps fold into one line; when no step has a finding, the first HEALTHY_SAMPLE are shown.
    `limit` None: every step."""
    from traceinsight.report.sections import group_steps, step_tags

    steps = doc.get("steps") or []
    if limit is None:
        return steps, 0, 0
    by_index = {s["index"]: s for s in steps}
    tags = step_tags(doc)
    flagged = [i for i in tags if i in by_index]
    if not flagged:
        shown = steps[:min(limit, HEALTHY_SAMPLE)]
        return shown, 0, len(steps) - len(shown)
    queues = []
    for gs in group_steps(doc):
        mine = [i for i in gs if i in by_index]
        queues.append(sorted(mine, key=lambda i: -by_index[i].get("wall_ns", by_index[i]["dur_ns"])))
    keep: set[int] = set()
    while len(keep) < min(limit, len(flagged)) and any(queues):
        for q in queues:
            while q and q[0] in keep:
                q.pop(0)
            if q and len(keep) < limit:
                keep.add(q.pop(0))
    for i in flagged:  # tags from groups whose steps were all taken already
        if len(keep) >= limit:
            break
        keep.add(i)
    shown = [by_index[i] for i in sorted(keep)]
    return shown, len(flagged) - len(shown), len(steps) - len(flagged)


def steps_table(doc: dict[str, Any], limit: int | None) -> Table:
    """One row per step that matters (`steps_shown`): its wall time, with its attention, other GPU work and the
    time the GPU waited for the host (the rest of the breakdown is in the JSON and `explain`), the launches,
    split-KV and the root causes that concern it (a spike marked)."""
    from traceinsight.report.sections import step_tags
    from traceinsight.report.timeline import breakdown_parts

    steps = doc.get("steps") or []
    shown, _, _ = steps_shown(doc, limit)
    modelled = any(isinstance(x.get("model"), dict) for s in shown for x in s["launches"])
    tags = step_tags(doc)
    flagged = sum(1 for s in steps if s["index"] in tags)
    title = f"Steps ({len(steps)}" + (f", {flagged} with findings" if flagged else "") + ")"
    if len(shown) < len(steps):
        title += (f": the {len(shown)} that matter most" if flagged else f", first {len(shown)}")
    broken = any(s.get("breakdown") for s in shown)
    cols = [("#", "right"), ("step", "left"), ("time", "right"), ("attention", "right")]
    if broken:
        cols += [("other GPU", "right"), ("host wait", "right")]
    if modelled:
        cols.append(("predicted", "right"))
    cols += [("launches", "left"), ("split-KV", "left"), ("findings", "left")]
    table = _table(title, cols)
    # Step names are what users search for: keep them on one line up to a point (they fold beyond it).
    table.columns[1].min_width = min(STEP_NAME_MIN_WIDTH, max((len(s["name"]) for s in shown), default=4))
    for s in shown:
        launches = s["launches"]
        text = "; ".join(f"{x['kernel']}{_grid(x['grid'])}" + (f"+{len(x['merges'])} merge" if x["merges"] else "")
                         for x in launches[:2]) + (f"; +{len(launches) - 2} more" if len(launches) > 2 else "")
        b = s.get("breakdown")
        row: list[Any] = [str(s["index"]), s["name"], fmt_ns(s.get("wall_ns", s["dur_ns"])), fmt_ns(s["attention_ns"])]
        if broken:
            parts = breakdown_parts(b)
            row += [fmt_ns(parts[k]) if b and parts[k] else ("" if b else "-") for k in ("other_gpu", "host")]
        if modelled:
            pred = [x["model"].get("predicted_ns") for x in launches if isinstance(x.get("model"), dict)]
            row.append(fmt_ns(sum(p for p in pred if p)) if pred and all(pred) else "-")
        ids = tags.get(s["index"], [])
        row += [text, _split(s.get("split_kv")), Text(", ".join(ids), style="red" if ids else "")]
        table.add_row(*row)
    return table


def folded_line(doc: dict[str, Any], limit: int | None) -> str:
    """What the steps table left out, in one line ('' when it shows every step)."""
    import statistics

    from traceinsight.report.sections import step_tags

    shown, more_flagged, healthy = steps_shown(doc, limit)
    if not more_flagged and not healthy:
        return ""
    tags = step_tags(doc)
    listed = {s["index"] for s in shown}
    parts = []
    if more_flagged:
        parts.append(f"{more_flagged} more step{'s' if more_flagged != 1 else ''} with findings")
    rest = [s.get("wall_ns", s["dur_ns"]) for s in doc.get("steps") or []
            if s["index"] not in tags and s["index"] not in listed]
    if rest:
        parts.append(f"{len(rest)} healthy step{'s' if len(rest) != 1 else ''} folded (time median "
                     f"{fmt_ns(statistics.median(rest))}, max {fmt_ns(max(rest))})")
    return "... " + ", ".join(parts) + ": --max-steps 0 shows all, --format json gives every field"


def render_doc(doc: dict[str, Any], console: Console, max_steps: int | None = 40, warnings: bool = True) -> None:
    """Print one analysis document: header (with the trace's warnings unless `warnings` is False: the CLI writes
    them on stderr), findings, thresholds, families, attention kernels, steps."""
    console.print(header(doc, warnings))
    block = findings_block(doc)
    if not isinstance(block, Text) or block.plain:
        console.print()
        console.print(block)
    for table in (thresholds_table(doc), families_table(doc), attention_kernels_table(doc)):
        if table is not None and table.row_count:
            console.print()
            console.print(fit(table, console))
    steps = doc.get("steps") or []
    console.print()
    if steps:
        console.print(fit(steps_table(doc, max_steps), console))
        folded = folded_line(doc, max_steps)
        if folded:
            console.print(Text(folded, style="dim"))
    else:
        console.print("No attention kernels found: no decode steps to show.")


def render_fleet_rows(rows: list[dict[str, Any]], console: Console) -> None:
    """The fleet table of summary rows (`report.fleet.fleet_summary`), then the findings across them."""
    from traceinsight.report.fleet import fleet_findings

    table = Table(title=f"{len(rows)} traces", box=box.SIMPLE_HEAD, title_justify="left")
    cols = (("trace", "left"), ("gpu", "left"), ("kernels", "right"), ("steps", "right"), ("split-KV off", "right"),
            ("step p50", "right"), ("step p99", "right"), ("step max", "right"), ("crit", "right"),
            ("warn", "right"), ("top finding", "left"))
    for name, just in cols:
        table.add_column(name, justify=just)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(str(r["trace"]), str(r.get("gpu") or "-"), str(r["kernels"]), str(r["steps"]),
                      str(r["split_kv_off"]), fmt_ns(r["step_p50_ns"]), fmt_ns(r["step_p99_ns"]),
                      fmt_ns(r["step_max_ns"]), Text(str(r["critical"]), style="bold red" if r["critical"] else ""),
                      Text(str(r["warnings"]), style="yellow" if r["warnings"] else ""),
                      str(r.get("top_finding") or ""))
    console.print(table)
    across = fleet_findings(rows)
    if across:
        console.print()
        for f in across:
            console.print(Text(f"{f['severity'].upper():8} ", style=SEVERITY_STYLE.get(f["severity"], "")),
                          Text(f"{f['id']}  {f['summary']}"))
    console.print("[dim]analyze one trace for its steps and findings; --format json gives every trace in full[/dim]")
