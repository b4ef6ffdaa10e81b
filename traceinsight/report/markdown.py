"""The Markdown report: the sections of the HTML report (`html.SECTIONS`, same order) as GitHub-flavoured
Markdown, with the plots written as PNG files beside it (`<stem>_figs/`), linked by relative path so the
folder can be pasted into a postmortem or a wiki."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceinsight import __version__
from traceinsight.report import kernel_tables, notes, sections, sweep_view, timeline
from traceinsight.report.html import SECTIONS
from traceinsight.report.md_table import md_table
from traceinsight.units import fmt_ns

if TYPE_CHECKING:  # matplotlib is imported only when a plot is drawn (diff pages need none)
    from traceinsight.report.figures import Gantt


def _figures() -> Any:
    """The plotting module (imports matplotlib on first use)."""
    from traceinsight.report import figures

    return figures

SEVERITY_MARK = {"critical": "🔴 CRITICAL", "warning": "🟠 WARNING", "info": "🔵 INFO"}


class _Figures:
    """Writes PNGs into the figures folder and returns their relative links."""

    def __init__(self, out: Path) -> None:
        self.dir = out.parent / f"{out.stem}_figs"
        self.rel = self.dir.name
        self.written: list[Path] = []

    def save(self, fig: Any, name: str) -> str:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{name}.png"
        path.write_bytes(_figures().to_png(fig))
        self.written.append(path)
        return f"{self.rel}/{path.name}"


def _na(text: str | None) -> str:
    return f"_{text}_" if text else ""


def _finding_md(f: dict[str, Any], names: dict[int, str], lead: str) -> str:
    """One finding by its id (its ref, e.g. `latency-spike#3`), severity, summary and first steps."""
    steps = list(f.get("steps") or [])
    shown = ", ".join(f"{i} ({names.get(i, '?')})" for i in steps[:4]) + (" …" if len(steps) > 4 else "")
    where = f" (steps {shown})" if steps else ""
    sev = (f.get("severity") or "info").upper()
    return f"  - {lead}`{f.get('ref') or f.get('id')}` {sev}: {f.get('summary', '')}{where}"


def verdict_md(doc: dict[str, Any]) -> str:
    why = notes.missing(doc, "findings")
    if why:
        return _na(why) + checks_md(doc)
    names = {s["index"]: s["name"] for s in doc.get("steps") or []}
    lines = []
    for g in sections.finding_groups(doc):
        first = g.findings[0]
        save = ""
        if g.saving_ns:
            share = g.share(doc)
            save = f" — **saves ≈ {fmt_ns(g.saving_ns)}**" + (f" ({share})" if share else "")
        more = f" (+{len(g.findings) - 1} more)" if len(g.findings) > 1 else ""
        mark = SEVERITY_MARK.get(g.severity, g.severity.upper())
        lines.append(f"- **{mark}** `{g.id}`: {g.summary}{more}{save}")
        if first.get("explanation"):
            lines.append(f"  - {first['explanation']}")
        if first.get("remedy"):
            lines.append(f"  - Remedy: {first['remedy']}")
        for f in g.findings:
            lines.append(_finding_md(f, names, ""))
        for f in g.related:
            lines.append(_finding_md(f, names, "evidence: "))
        if g.steps:
            shown = ", ".join(f"{i} ({names.get(i, '?')})" for i in g.steps[:6])
            lines.append(f"  - Steps ({len(g.steps)}): {shown}" + (" …" if len(g.steps) > 6 else ""))
    savings = sections.savings_line(doc)
    return "\n".join(lines) + (f"\n\n_{savings}._" if savings else "") + checks_md(doc)


def checks_md(doc: dict[str, Any]) -> str:
    line = notes.checks_line(doc)
    if line is None:
        return ""
    _, rows = notes.checks(doc)
    quiet = [f"`{c.get('id')}` {c.get('status')}: {c.get('reason')}" for c in rows if c.get("status") != "fired"]
    return f"\n\n_{line}._" + ("\n\n" + "\n".join(f"- {q}" for q in quiet) if quiet else "")


def timeline_md(doc: dict[str, Any], figs: _Figures, prefix: str) -> str:
    why = notes.missing(doc, "steps")
    if why:
        return _na(why)
    points = timeline.timeline(doc)
    link = figs.save(_figures().timeline_figure(points, f"Step time of {len(points)} steps"), f"{prefix}timeline")
    spikes = [p for p in points if p.spike]
    text = f"![step time per step]({link})\n\n"
    if not doc.get("findings") and not doc.get("checks"):
        return text + "_Spikes: not available: needs the diagnostics stage (its latency-spike rule)._"
    if not spikes:
        return text + "No spike: no step broke from the trend."
    rows = [[p.index, p.name, fmt_ns(p.dur_ns), p.cause or "unexplained"] for p in spikes[:15]]
    more = f"\n\n… and {len(spikes) - 15} more spikes." if len(spikes) > 15 else ""
    return text + md_table(["step", "name", "time", "cause"], rows, right={0, 2}) + more


def breakdown_md(doc: dict[str, Any], figs: _Figures, prefix: str) -> str:
    why = notes.missing(doc, "steps")
    if why:
        return _na(why)
    rows = timeline.incident_rows(doc)
    if not rows:
        return "_No latency spike to attribute (each step's breakdown is in the JSON: steps[].breakdown)._"
    link = figs.save(_figures().breakdown_figure(rows), f"{prefix}breakdown")
    table = [[r.label, r.cause, f"step {r.onset[0]}" if r.onset else "",
              f"{fmt_ns(r.worst_ns)} vs {fmt_ns(r.worst_baseline_ns)} ({r.ratio:.1f}x)", timeline.parts_text(r.parts)]
             for r in rows]
    return (f"![step breakdown of each spike against its baseline]({link})\n\n"
            + md_table(["incident", "cause", "onset", "worst step", "what grew"], table, right={3}))


def sweep_md(doc: dict[str, Any], figs: _Figures, prefix: str) -> str:
    panels = sweep_view.sweep(doc)
    if not panels:
        return _na(notes.missing(doc, "sweep"))
    link = figs.save(_figures().sweep_figure(sweep_view.plotted_panels(panels)), f"{prefix}sweep")
    lines = [f"![latency vs batch size per distribution]({link})", ""]
    for p in panels:
        last_on, first_off = sweep_view.observed_switch(p)
        th = p.threshold_text
        obs = (f"split-KV observed on up to B={last_on}, off from B={first_off}" if first_off
               else "split-KV state does not change with B")
        lines.append(f"- **{p.key}** ({p.kernel}, {p.backend}): {th}; {obs}.")
    for p in panels:
        headers = [f"{p.key}: dist / B", *[str(b) for b in p.batch_sizes]]
        rows = []
        for s in p.series:
            by_b = dict(zip(s.batch, s.median_ns, strict=True))
            rows.append([s.dist, *[fmt_ns(by_b.get(b)) for b in p.batch_sizes]])
        lines += ["", md_table(headers, rows, right=set(range(1, len(headers))))]
    return "\n".join(lines)


def schedule_md(sched: Gantt | str | None, figs: _Figures, prefix: str) -> str:
    if sched is None or isinstance(sched, str):
        return _na(sched or "not available: needs the schedule model and a batch composition")
    link = figs.save(_figures().gantt_figure(sched), f"{prefix}schedule")
    return f"![{sched.title.replace(chr(10), ' · ')}]({link})\n\n" + "\n".join(f"- {n}" for n in sched.notes)


def kernels_md(doc: dict[str, Any], limit: int = 30) -> str:
    rows = kernel_tables.kernel_rows(doc, limit)
    if not rows:
        return _na("not available: no kernel in the trace")
    body = [[k.get("kernel"), k.get("family"), k.get("backend") or "–", k.get("phase"), k.get("count"),
             fmt_ns(k.get("total_ns")), fmt_ns(k.get("mean_ns")), *kernel_tables.spread_cells(k),
             f"{(k.get('share') or 0):.1%}", kernel_tables.grids_text(k.get("grids")),
             kernel_tables.params_text(k.get("params"))] for k in rows]
    text = md_table(["kernel", "family", "backend", "phase", "count", "total", "mean", *kernel_tables.SPREAD_COLUMNS,
                     "share", "grids", "parameters"], body, right=set(range(4, 14)))
    total = len(doc.get("kernels") or [])
    return text + (f"\n\n{total - len(rows)} more kernels with less time: see the JSON output." if total > len(rows)
                   else "")


def thresholds_md(doc: dict[str, Any]) -> str:
    why = notes.missing(doc, "thresholds")
    if why:
        return _na(why)
    observed = sweep_view.observed_switches(doc)
    rows = [[str(t.get("kernel")) + (f" ({t['variants']} template variants)" if t.get("variants", 1) > 1 else ""),
             t.get("backend") or "–", t.get("shape") or "–", t.get("kv_heads"), t.get("occupancy"), t.get("max_grid"),
             f"**{t['b_threshold']}**" if t.get("b_threshold") else "–",
             observed.get((t.get("kernel"), t.get("backend")), "–")] for t in kernel_tables.threshold_rows(doc)]
    return md_table(["kernel", "backend", "shape", "KV heads", "CTAs / SM", "max grid", "B_th",
                     "observed in this trace"], rows, right={3, 4, 5, 6})


def methods_md(doc: dict[str, Any]) -> str:
    return "\n".join(f"- **{k}.** {v}" for k, v in notes.methods(doc))


def _header(doc: dict[str, Any]) -> str:
    tr = doc.get("trace") or {}
    gpu = tr.get("gpu") or {}
    gpu_text = (gpu.get("name") or "unknown GPU") + (f", {gpu['num_sms']} SMs" if gpu.get("num_sms") else "")
    kernels = sum(k.get("count") or 0 for k in doc.get("kernels") or [])
    return (f"`{tr.get('path')}` [{tr.get('format')}] · GPU **{gpu_text}** · span {fmt_ns(tr.get('dur_ns'))} · "
            f"{kernels} kernels · {len(doc.get('steps') or [])} steps")


def trace_md(doc: dict[str, Any], sched: Gantt | str | None, figs: _Figures, prefix: str, level: int) -> str:
    h = "#" * level
    parts = {
        "verdict": verdict_md(doc),
        "timeline": timeline_md(doc, figs, prefix),
        "breakdown": breakdown_md(doc, figs, prefix),
        "sweep": sweep_md(doc, figs, prefix),
        "schedule": schedule_md(sched, figs, prefix),
        "kernels": kernels_md(doc),
        "thresholds": thresholds_md(doc),
        "methods": methods_md(doc),
    }
    return "\n\n".join(f"{h} {title}\n\n{parts[sid]}" for sid, title in SECTIONS)


def render(docs: list[dict[str, Any]], out: Path, schedules: Sequence[Gantt | str | None] | None = None) -> str:
    """The Markdown text of the report to be written at `out`; writes its figures into `<out stem>_figs/`."""
    schedules = schedules or [None] * len(docs)
    figs = _Figures(out)
    parts = ["# traceinsight report", ""]
    if len(docs) == 1:
        parts += [_header(docs[0]), "", trace_md(docs[0], schedules[0], figs, "", 2)]
    else:
        from traceinsight.report.run_md import runs_md

        parts.append(runs_md(docs))  # the ranks of a distributed run, together (docs/MULTIRANK.md)
        for i, (doc, sched) in enumerate(zip(docs, schedules, strict=True)):
            parts += [f"## Trace {i + 1}", "", _header(doc), "", trace_md(doc, sched, figs, f"t{i}_", 3), ""]
    parts += ["", f"---\n_traceinsight {__version__}. Times are GPU times from the trace._", ""]
    return "\n".join(parts)
