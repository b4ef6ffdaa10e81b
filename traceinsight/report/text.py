"""Terminal rendering of an analysis with rich: header, findings, kernel time by family, steps."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.model.steps import Step

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def fmt_ns(ns: int | float | None) -> str:
    """Human time from nanoseconds: 850 ns, 12.3 us, 4.56 ms, 1.23 s."""
    if ns is None:
        return "-"
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}" if abs(ns) < 100 * scale else f"{ns / scale:.0f} {unit}"
    return f"{ns:.0f} ns"


def _split(state: bool | None) -> Text:
    if state is True:
        return Text("on", style="green")
    if state is False:
        return Text("off", style="bold red")
    return Text("?", style="dim")


def _grid(g: tuple[int, int, int] | list[int]) -> str:
    return "(" + ",".join(str(x) for x in g) + ")"


def header(a: TraceAnalysis) -> Text:
    gpu = a.gpu
    t = Text()
    t.append(a.path, style="bold")
    t.append(f"  [{a.format}" + (f" {a.format_version}" if a.format_version else "") + "]\n")
    name = gpu.get("name") or "unknown GPU"
    sms = f", {gpu['num_sms']} SMs" if gpu.get("num_sms") else ""
    total = sum(k["total_ns"] for k in a.kernels)
    count = sum(k["count"] for k in a.kernels)
    t.append(f"GPU: {name}{sms}   span: {fmt_ns(a.dur_ns)}   kernels: {count} ({fmt_ns(total)} GPU time)")
    t.append(f"   steps: {len(a.steps)}")
    for w in a.warnings:
        t.append(f"\nwarning: {w}", style="yellow")
    return t


def families_table(a: TraceAnalysis) -> Table:
    table = Table(title="Kernel time by family / backend", box=box.SIMPLE_HEAD, title_justify="left")
    for col, just in (("family", "left"), ("backend", "left"), ("count", "right"), ("time", "right"),
                      ("share", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for f in a.families:
        table.add_row(f["family"], f["backend"] or "-", str(f["count"]), fmt_ns(f["total_ns"]), f"{f['share']:.1%}")
    return table


def attention_kernels_table(a: TraceAnalysis) -> Table:
    table = Table(title="Attention kernels", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("kernel", "backend", "phase", "count", "time", "share", "grids"):
        table.add_column(col, justify="right" if col in ("count", "time", "share") else "left")
    for k in a.kernels:
        if k["family"] not in ("attention", "merge", "prepare"):
            continue
        grids = " ".join(_grid(g) for g in (k["grids"] or [])[:3]) + (" ..." if len(k["grids"] or []) > 3 else "")
        table.add_row(k["kernel"], k["backend"] or "-", k["phase"], str(k["count"]), fmt_ns(k["total_ns"]),
                      f"{k['share']:.1%}", grids)
    return table


def steps_table(steps: list[Step], limit: int | None) -> Table:
    shown = steps if limit is None else steps[:limit]
    title = f"Steps ({len(steps)})" + (f", first {len(shown)}" if len(shown) < len(steps) else "")
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("#", "step", "time", "attention", "launches", "split-KV"):
        table.add_column(col, justify="right" if col in ("#", "time", "attention") else "left")
    for s in shown:
        launches = "; ".join(
            f"{x.attention.kernel}{_grid(x.attention.grid)}" + (f"+{len(x.merges)} merge" if x.merges else "")
            for x in s.launches[:3]
        ) + (f"; +{len(s.launches) - 3} more" if len(s.launches) > 3 else "")
        table.add_row(str(s.index), s.name, fmt_ns(s.dur_ns), fmt_ns(s.attention_ns), launches, _split(s.split_kv))
    return table


def findings_block(findings: list[Any]) -> Table | None:
    if not findings:
        return None
    table = Table(title="Findings", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("severity", "id", "steps", "summary", "saving"):
        table.add_column(col)
    for f in findings:
        d = f.to_json() if hasattr(f, "to_json") else f
        steps = d.get("steps") or []
        shown = ",".join(str(i) for i in steps[:6]) + ("..." if len(steps) > 6 else "")
        table.add_row(Text(d["severity"], style=SEVERITY_STYLE.get(d["severity"], "")), d["id"], shown,
                      d["summary"], fmt_ns(d.get("saving_ns")))
    return table


def render(a: TraceAnalysis, console: Console, max_steps: int | None = 40) -> None:
    console.print(header(a))
    block = findings_block(a.findings)
    if block is not None:
        console.print(block)
    console.print(families_table(a))
    console.print(attention_kernels_table(a))
    if a.steps:
        console.print(steps_table(a.steps, max_steps))
        if max_steps is not None and len(a.steps) > max_steps:
            console.print(f"[dim]... {len(a.steps) - max_steps} more steps: --max-steps 0 shows all, "
                          "--format json gives every field[/dim]")
    else:
        console.print("No attention kernels found: no decode steps to show.")
