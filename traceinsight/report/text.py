"""Terminal rendering of an analysis with rich: a header, the findings first (coloured by severity, one line
each with the saving and the remedy), then compact tables: thresholds, kernel time by family, attention
kernels, steps. Colour follows the console: none when stdout is not a TTY or NO_COLOR is set (rich honours
both). Everything is read from the JSON document (`json_doc.to_json`), so the terminal shows what JSON gives."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from traceinsight.units import fmt_ns

if TYPE_CHECKING:
    from traceinsight.diagnose.context import TraceAnalysis

# Step names up to this many characters stay on one line in the steps table.
STEP_NAME_MIN_WIDTH = 48

SEVERITY_STYLE = {"critical": "bold red", "warning": "bold yellow", "info": "cyan"}


def _split(state: bool | None) -> Text:
    if state is True:
        return Text("on", style="green")
    if state is False:
        return Text("off", style="bold red")
    return Text("?", style="dim")


def _grid(g: tuple[int, int, int] | list[int]) -> str:
    return "(" + ",".join(str(x) for x in g) + ")"


def _table(title: str | None, columns: Sequence[tuple[str, str]]) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", title_style="bold", padding=(0, 1),
                  pad_edge=False, show_edge=False)
    for col, just in columns:
        table.add_column(col, justify=just, overflow="fold" if col in ("summary", "step") else "ellipsis")  # type: ignore[arg-type]
    return table


def header(doc: dict[str, Any]) -> Text:
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
    for w in tr.get("warnings") or []:
        t.append(f"\nwarning: {w}", style="yellow")
    return t


def findings_block(doc: dict[str, Any]) -> Table | Text:
    """Findings, worst first, one row per rule: severity, id, summary of its worst finding (+ how many more)
    and the saving; under a critical rule's summary its remedy. A grid, so long lines wrap inside their column.
    The last line says how many rules were checked. Empty Text when the diagnostics reported nothing."""
    from traceinsight.report.sections import checks_line, finding_groups, saving_share

    groups = finding_groups(doc)
    checked = checks_line(doc)
    if not groups:
        return Text(f"Findings: none ({checked})", style="bold green") if checked else Text()
    count = sum(len(g.findings) for g in groups)
    table = Table.grid(padding=(0, 1), pad_edge=True)
    table.title = f"Findings ({count})"
    table.title_justify = "left"
    table.title_style = "bold"
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column(ratio=1)
    for g in groups:
        cell = Text(g.summary)
        if len(g.findings) > 1:
            cell.append(f" (+{len(g.findings) - 1} more)", style="dim")
        if g.saving_ns:
            share = saving_share(doc, g.id, g.saving_ns)
            share = f", {share}" if share else ""
            cell.append(f"  (saves ≈ {fmt_ns(g.saving_ns)}{share})", style="bold")
        if g.steps and len(g.findings) == 1:
            cell.append(f"  [{len(g.steps)} step{'s' if len(g.steps) > 1 else ''}]", style="dim")
        remedy = g.findings[0].get("remedy")
        if g.severity == "critical" and remedy:
            cell.append(f"\n→ {remedy}", style="dim")
        table.add_row(Text(g.severity.upper(), style=SEVERITY_STYLE.get(g.severity, "")), Text(g.id, style="bold"),
                      cell)
    if checked:
        table.caption = f"{checked} (--format json gives each rule's reason)"
        table.caption_justify = "left"
        table.caption_style = "dim"
    return table


def thresholds_table(doc: dict[str, Any]) -> Table | None:
    rows = doc.get("thresholds") or []
    if not rows:
        return None
    table = _table("Split-KV thresholds", [("kernel", "left"), ("backend", "left"), ("H_kv", "right"),
                                           ("CTAs/SM", "right"), ("max grid", "right"), ("B_th", "right")])
    for r in rows:
        table.add_row(str(r.get("kernel")), r.get("backend") or "-", str(r.get("kv_heads") or "-"),
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
                                         ("grids", "left")])
    for k in doc.get("kernels") or []:
        if k["family"] not in ("attention", "merge", "prepare"):
            continue
        grids = k.get("grids") or []
        shown = " ".join(_grid(g) for g in grids[:3]) + (" ..." if len(grids) > 3 else "")
        table.add_row(k["kernel"], k.get("backend") or "-", k["phase"], str(k["count"]), fmt_ns(k["total_ns"]),
                      f"{(k.get('share') or 0):.1%}", shown)
    return table


def steps_table(doc: dict[str, Any], limit: int | None) -> Table:
    """One row per step: its wall time, with its attention, other GPU work and the time the GPU waited for the
    host (the rest of the breakdown is in the JSON and `explain`), the launches, split-KV and the findings naming
    it (a spike with its cause)."""
    from traceinsight.report.sections import breakdown_parts, spike_causes

    steps = doc.get("steps") or []
    shown = steps if limit is None else steps[:limit]
    modelled = any(isinstance(x.get("model"), dict) for s in shown for x in s["launches"])
    flagged: dict[int, list[str]] = {}
    for f in doc.get("findings") or []:
        for i in f.get("steps") or []:
            flagged.setdefault(i, []).append(f.get("id", ""))
    title = f"Steps ({len(steps)})" + (f", first {len(shown)}" if len(shown) < len(steps) else "")
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
    causes = spike_causes(doc)
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
        ids = [f"latency-spike({causes[s['index']]})" if i == "latency-spike" and s["index"] in causes else i
               for i in flagged.get(s["index"], [])]
        row += [text, _split(s.get("split_kv")), Text(",".join(ids), style="red" if ids else "")]
        table.add_row(*row)
    return table


def render_doc(doc: dict[str, Any], console: Console, max_steps: int | None = 40) -> None:
    """Print one analysis document: header, findings, thresholds, families, attention kernels, steps."""
    console.print(header(doc))
    block = findings_block(doc)
    if not isinstance(block, Text) or block.plain:
        console.print()
        console.print(block)
    for table in (thresholds_table(doc), families_table(doc), attention_kernels_table(doc)):
        if table is not None and table.row_count:
            console.print()
            console.print(table)
    steps = doc.get("steps") or []
    console.print()
    if steps:
        console.print(steps_table(doc, max_steps))
        if max_steps is not None and len(steps) > max_steps:
            console.print(f"[dim]... {len(steps) - max_steps} more steps: --max-steps 0 shows all, "
                          "--format json gives every field[/dim]")
    else:
        console.print("No attention kernels found: no decode steps to show.")


def render(a: TraceAnalysis, console: Console, max_steps: int | None = 40) -> None:
    """Print the analysis of one trace (see `render_doc`)."""
    from traceinsight.report.json_doc import to_json

    render_doc(to_json(a), console, max_steps)


def make_console(file: Any = None, no_color: bool = False, stderr: bool = False,
                 force_terminal: bool | None = None) -> Console:
    """A console that colours only a terminal, never when NO_COLOR is set (non-empty) or `no_color` is asked;
    200 columns wide when writing to a pipe or file."""
    off = no_color or bool(os.environ.get("NO_COLOR"))
    tty = force_terminal if force_terminal is not None else (file is None and sys.stdout.isatty())
    return Console(file=file, stderr=stderr, no_color=off, color_system=None if off else "auto", highlight=False,
                   soft_wrap=False, force_terminal=force_terminal, width=None if tty else 200)


# Files larger than this get a progress display while they are read.
PROGRESS_MIN_BYTES = 8 * 1024 * 1024


@contextmanager
def ingest_progress(paths: Sequence[Path], quiet: bool = False) -> Iterator[None]:
    """Around a long ingest: a transient spinner on stderr with the file names, total size and elapsed time.
    Shown only when stderr is a terminal, `quiet` is off and the inputs are large (PROGRESS_MIN_BYTES); never
    mixes with stdout, so `--format json | jq` stays clean."""
    size = 0
    for p in paths:
        try:
            size += Path(p).stat().st_size
        except OSError:
            pass
    err = make_console(stderr=True)
    if quiet or size < PROGRESS_MIN_BYTES or not err.is_terminal:
        yield
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    names = ", ".join(Path(p).name for p in paths[:2]) + (f" +{len(paths) - 2}" if len(paths) > 2 else "")
    with Progress(SpinnerColumn(), TextColumn("[bold]analyzing[/bold] {task.description}"), TimeElapsedColumn(),
                  console=err, transient=True) as progress:
        progress.add_task(f"{names} ({size / 1e6:.0f} MB)", total=None)
        yield


def render_fleet(analyses: list[TraceAnalysis], console: Console) -> None:
    """Several traces: one summary row per trace, then the findings that stand out across them."""
    from traceinsight.report.fleet import fleet_findings, fleet_summary

    rows = fleet_summary(analyses)
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
