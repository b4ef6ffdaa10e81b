"""The fleet report document (`fleet/report.py`'s `build`) as text (rich), self-contained HTML (no script, no URL)
and Markdown. Links come from the document, relative to the dataset folder; `base` says how the page reaches it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceinsight import __version__
from traceinsight.fleet.report import TOP, href, trace_link
from traceinsight.units import fmt_ns

if TYPE_CHECKING:
    from rich.console import Console


# --- shared wording -----------------------------------------------------------------------------------------

def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _pct(x: float | None) -> str:
    if x is None:
        return "-"
    return "<1%" if 0 < x < 0.005 else f"{100 * x:.0f}%"


def rule_share(r: dict[str, Any], ov: dict[str, Any]) -> str:
    """A rule's loss as a share of the fleet's time it comes from: '45% of steps', '24% between'."""
    parts = []
    if r.get("lost_steps_ns") and ov.get("steps_wall_ns"):
        parts.append(f"{_pct(r['lost_steps_ns'] / ov['steps_wall_ns'])} of steps")
    if r.get("lost_between_ns") and ov.get("between_steps_ns"):
        parts.append(f"{_pct(r['lost_between_ns'] / ov['between_steps_ns'])} between")
    return ", ".join(parts) or "-"


def trace_share(t: dict[str, Any]) -> float | None:
    """A trace's loss as a share of its time (steps' wall time plus the time between steps)."""
    total = int(t.get("steps_wall_ns") or 0) + int(t.get("between_steps_ns") or 0)
    return (int(t.get("lost_ns") or 0) / total) if total else None


def causes_text(t: dict[str, Any], limit: int = 4) -> str:
    """'split-kv-off 129 ms, gpu-idle-gaps 25.3 ms, +3': the trace's root causes, costliest first."""
    rc = t.get("root_causes") or []
    shown = [f"{c['rule_id']} {fmt_ns(c['lost_ns'])}" if c.get("lost_ns") else str(c["rule_id"])
             for c in rc[:limit]]
    return ", ".join(shown) + (f", +{len(rc) - limit}" if len(rc) > limit else "") if shown else "-"


def failure_text(f: dict[str, Any]) -> str:
    """'SOURCE: what went wrong' (the error alone when it names its source already)."""
    source, error = str(f.get("source") or ""), str(f.get("error") or "no error recorded")
    return error if not source or error.startswith(source) else f"{source}: {error}"


def ratio_text(r: float | None) -> str:
    return "-" if r is None else f"{r:.1f}×"


def overview_lines(doc: dict[str, Any]) -> list[str]:
    """The overview as lines of text (each figure with its unit)."""
    ov = doc["overview"]
    ds = doc["dataset"]
    counts = f"{ov['ok']} analyzed, {ov['error']} failed, {ov['pending']} pending" + (
        f", {ov['missing']} missing" if ov.get("missing") else "")
    gpus = ", ".join(f"{g['name']} ×{g['traces']}" for g in ov["gpus"]) or "-"
    lines = [f"traces: {ov['traces']} ({counts})   GPUs: {gpus}",
             f"steps: {ov['steps']} ({fmt_ns(ov['steps_wall_ns'])} wall time in steps, "
             f"{fmt_ns(ov['between_steps_ns'])} between steps)"]
    lost = [f"{fmt_ns(ov['lost_steps_ns'])} of {fmt_ns(ov['steps_wall_ns'])} in steps"
            + (f" ({_pct(ov['lost_steps_ns'] / ov['steps_wall_ns'])})" if ov["steps_wall_ns"] else "")]
    if ov["lost_between_ns"]:
        lost.append(f"{fmt_ns(ov['lost_between_ns'])} of {fmt_ns(ov['between_steps_ns'])} between steps"
                    + (f" ({_pct(ov['lost_between_ns'] / ov['between_steps_ns'])})" if ov["between_steps_ns"]
                       else ""))
    lines.append(f"time lost (root causes' bounded savings): {fmt_ns(ov['lost_ns'])}: " + ", ".join(lost))
    if ds.get("updated"):
        lines.append(f"dataset updated {ds['updated']}")
    return lines


OUTLIERS_NOTE = ("each trace against the median of the analyzed traces on its GPU (3 or more): median and p99 "
                 "step, share of steps with split-KV off, critical findings")
ROOT_CAUSES_NOTE = ("time lost: the root cause's savings summed over its traces, each bounded step by step by "
                    "the time it comes from (the steps' wall time minus their floor, what they would still take "
                    "with the remedy, or the time between steps)")
STEPS_NOTE = ("time: GPU span of the step's kernels; ×median: against its trace's median step; wall: what the "
              "engine waited for it")


# --- text -------------------------------------------------------------------------------------------------------

def render_text(doc: dict[str, Any], console: Console, top: int = TOP) -> None:
    """The report in the terminal: overview, root causes, traces (the `top` costliest), worst steps, outliers,
    failed traces. Links are paths under the dataset folder."""
    from rich.text import Text

    from traceinsight.report.console import fit
    from traceinsight.report.text import SEVERITY_STYLE

    ds = doc["dataset"]
    console.print(Text(f"Fleet report: {ds['path']}", style="bold"))
    for line in overview_lines(doc):
        console.print(Text(line))

    ov = doc["overview"]
    console.print()
    rc = doc["root_causes"]
    if rc:
        t = _table("Root causes, most time lost first", [
            ("severity", "left"), ("rule", "left"), ("traces", "right"), ("steps", "right"), ("time lost", "right"),
            ("of fleet time", "left"), ("worst trace (its loss)", "left")])
        for r in rc:
            t.add_row(Text(r["severity"].upper(), style=SEVERITY_STYLE.get(r["severity"], "")), r["rule_id"],
                      f"{r['traces']} of {ov['ok']} ({_pct(r['share_of_traces'])})", str(r["steps"]),
                      fmt_ns(r["lost_ns"]), rule_share(r, ov),
                      f"{r['worst_trace']} ({fmt_ns(r['worst_trace_lost_ns'])})")
        console.print(fit(t, console, ("of fleet time", "steps")))
        console.print(Text(ROOT_CAUSES_NOTE, style="dim"))
    else:
        console.print("Root causes: none (no finding in any analyzed trace)")
    if doc["evidence_only"]:
        console.print(Text("fired only as evidence of other root causes: " + ", ".join(
            f"{r['rule_id']} ({_n(r['traces'], 'trace')})" for r in doc["evidence_only"]), style="dim"))

    traces = doc["traces"]
    if traces:
        console.print()
        t = _table(f"Traces, most time lost first (each one's report: {Path(ds['path']) / 'reports'}/<trace>.html)", [
            ("trace", "left"), ("gpu", "left"), ("steps", "right"), ("p50 step", "right"), ("p99 step", "right"),
            ("time lost", "right"), ("of its time", "right"), ("root causes (time lost)", "left"),
            ("report", "left")])
        for r in traces[:top]:
            t.add_row(r["trace"], r.get("gpu") or "-", str(r.get("steps") or 0), fmt_ns(r.get("step_p50_ns")),
                      fmt_ns(r.get("step_p99_ns")), fmt_ns(r["lost_ns"]), _pct(trace_share(r)), causes_text(r),
                      trace_link(r) or "-")
        console.print(fit(t, console, ("report", "of its time", "gpu", "p50 step")))
        if len(traces) > top:
            console.print(Text(f"... {len(traces) - top} more traces: --top N lists more, --format html or json "
                               "lists all", style="dim"))

    worst = doc["worst_steps"]
    if worst:
        console.print()
        t = _table(f"Worst steps of the fleet ({len(worst)} slowest)", [
            ("trace", "left"), ("step", "right"), ("name", "left"), ("time", "right"), ("×median", "right"),
            ("wall", "right"), ("findings naming it", "left"), ("report", "left")])
        for w in worst:
            t.add_row(w["trace"], str(w["step"]), w.get("name") or "-", fmt_ns(w["dur_ns"]),
                      ratio_text(w.get("ratio")), fmt_ns(w.get("wall_ns")), ", ".join(w["findings"]) or "-",
                      w.get("report") or "-")
        console.print(fit(t, console, ("report", "wall", "name", "×median")))
        console.print(Text(STEPS_NOTE, style="dim"))

    console.print()
    if doc["outliers"]:
        console.print(Text(f"Outliers against the fleet: {OUTLIERS_NOTE}", style="bold"))
        for f in doc["outliers"]:
            console.print(Text(f"{f['severity'].upper():8} ", style=SEVERITY_STYLE.get(f["severity"], "")),
                          Text(f"{f['id']}  {f['summary']}"))
    else:
        console.print(Text(f"Outliers against the fleet: none ({OUTLIERS_NOTE})"))

    failed = doc["failed"]
    if failed:
        console.print()
        t = _table(f"Not analyzed ({len(failed)}): left out of every figure above", [
            ("trace", "left"), ("status", "left"), ("error", "left")])
        for f in failed:
            t.add_row(f["trace"], f["status"], failure_text(f))
        console.print(t)


# Widest a folded column gets in the text tables (it wraps beyond), so that the others keep their room.
_MAX_WIDTH = {"trace": 30, "rule": 24, "root causes (time lost)": 44, "findings naming it": 28, "error": 80,
              "name": 26, "worst trace (its loss)": 40, "report": 40}


def _table(title: str, columns: list[tuple[str, str]]) -> Any:
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", title_style="bold", padding=(0, 1),
              pad_edge=False, show_edge=False)
    for name, just in columns:
        t.add_column(name, justify=just, overflow="fold" if name in _MAX_WIDTH else "ellipsis",  # type: ignore[arg-type]
                     max_width=_MAX_WIDTH.get(name), no_wrap=name not in _MAX_WIDTH)
    return t


# --- HTML ---------------------------------------------------------------------------------------------------------

def render_html(doc: dict[str, Any], base: str = "") -> str:
    """A self-contained HTML page (inline CSS, no script, no URL; report/templates/fleet.html.j2): links to the
    traces' own reports are relative, reaching the dataset folder by `base` ('' when the page is written into it;
    see `link_base`)."""
    from traceinsight.report.templating import render

    ov = doc["overview"]

    def a(rel: str | None, text: str) -> dict[str, Any]:
        return {"href": href(base, rel) if rel else None, "text": text}

    most = max((int(t["lost_ns"]) for t in doc["traces"]), default=0) or 1
    n = len(doc["worst_steps"])
    return render(
        "fleet.html.j2", title=f"traceinsight fleet: {Path(doc['dataset']['path']).name}", version=__version__,
        path=doc["dataset"]["path"], overview=overview_lines(doc),
        toc=[("root-causes", "Root causes"), ("traces", "Traces"), ("worst-steps", "Worst steps"),
             ("outliers", "Outliers"), ("failed", "Not analyzed")],
        root_causes=[{"severity": r["severity"], "rule_id": r["rule_id"], "traces": f"{r['traces']} of {ov['ok']}",
                      "share": _pct(r["share_of_traces"]), "steps": r["steps"], "lost": fmt_ns(r["lost_ns"]),
                      "of_fleet": rule_share(r, ov), "worst": a(_link_of(doc, r["worst_trace"]), r["worst_trace"]),
                      "worst_lost": fmt_ns(r["worst_trace_lost_ns"])} for r in doc["root_causes"]],
        evidence_only=", ".join(f"{r['rule_id']} ({_n(r['traces'], 'trace')})" for r in doc["evidence_only"]),
        root_causes_note=ROOT_CAUSES_NOTE,
        traces=[{"trace": a(trace_link(t), t["trace"]), "gpu": t.get("gpu") or "-", "steps": t.get("steps") or 0,
                 "p50": fmt_ns(t.get("step_p50_ns")), "p99": fmt_ns(t.get("step_p99_ns")), "lost": fmt_ns(t["lost_ns"]),
                 "share": _pct(trace_share(t)), "causes": causes_text(t, limit=8),
                 "bars": [(cls, f"{160 * int(t[key]) / most:.1f}", f"{title} {fmt_ns(t[key])}")
                          for key, cls, title in (("lost_steps_ns", "steps", "in steps"),
                                                  ("lost_between_ns", "between", "between steps")) if t[key]],
                 "reports": [a(rel, fmt) for fmt, rel in sorted((t.get("report") or {}).items())]}
                for t in doc["traces"]],
        worst_heading=f"Worst steps ({n} slowest)" if n else "Worst steps",
        worst_steps=[{"trace": a(_link_of(doc, w["trace"]), w["trace"]), "step": w["step"],
                      "name": a(w.get("report"), w.get("name") or "-"), "time": fmt_ns(w["dur_ns"]),
                      "ratio": ratio_text(w.get("ratio")), "wall": fmt_ns(w.get("wall_ns")),
                      "findings": ", ".join(w["findings"]) or "-"} for w in doc["worst_steps"]],
        steps_note=STEPS_NOTE, outliers=doc["outliers"], outliers_note=OUTLIERS_NOTE, failed=doc["failed"])


def _link_of(doc: dict[str, Any], trace: str | None) -> str | None:
    for t in doc["traces"]:
        if t["trace"] == trace:
            return trace_link(t)
    return None


# --- Markdown -------------------------------------------------------------------------------------------------

def render_markdown(doc: dict[str, Any], base: str = "", top: int = TOP) -> str:
    """The report as GitHub-flavoured Markdown; links relative, reaching the dataset folder by `base`."""
    from traceinsight.report.md_table import md_table

    ov = doc["overview"]

    def a(rel: str | None, text: str) -> str:
        text = text.replace("[", "\\[").replace("]", "\\]")
        return f"[{text}]({href(base, rel)})" if rel else text

    out = [f"# traceinsight fleet report: `{doc['dataset']['path']}`", ""]
    out += [f"- {line}" for line in overview_lines(doc)]
    out += ["", "## Root causes", ""]
    if doc["root_causes"]:
        out.append(md_table(
            ["severity", "rule", "traces", "share of traces", "steps", "time lost", "of fleet time", "worst trace"],
            [[r["severity"].upper(), f"`{r['rule_id']}`", f"{r['traces']} of {ov['ok']}", _pct(r["share_of_traces"]),
              r["steps"], fmt_ns(r["lost_ns"]), rule_share(r, ov),
              f"{a(_link_of(doc, r['worst_trace']), r['worst_trace'])} ({fmt_ns(r['worst_trace_lost_ns'])})"]
             for r in doc["root_causes"]], right={2, 3, 4, 5}))
    else:
        out.append("_No finding in any analyzed trace._")
    if doc["evidence_only"]:
        out += ["", "Fired only as evidence of other root causes: " + ", ".join(
            f"`{r['rule_id']}` ({_n(r['traces'], 'trace')})" for r in doc["evidence_only"]) + "."]
    out += ["", f"_{ROOT_CAUSES_NOTE}._", "", "## Traces, most time lost first", ""]
    traces = doc["traces"]
    out.append(md_table(["trace", "gpu", "steps", "p50 step", "p99 step", "time lost", "of its time", "root causes"],
                        [[a(trace_link(t), t["trace"]), t.get("gpu") or "-", t.get("steps") or 0,
                          fmt_ns(t.get("step_p50_ns")), fmt_ns(t.get("step_p99_ns")), fmt_ns(t["lost_ns"]),
                          _pct(trace_share(t)), causes_text(t)] for t in traces[:top]], right={2, 3, 4, 5, 6})
               if traces else "_No analyzed trace._")
    if len(traces) > top:
        out += ["", f"_… {len(traces) - top} more traces: `--top N` lists more, `--format html` or `json` all._"]
    out += ["", f"## Worst steps ({len(doc['worst_steps'])} slowest)" if doc["worst_steps"] else "## Worst steps", ""]
    out.append(md_table(["trace", "step", "name", "time", "×median", "wall", "findings naming it"],
                        [[w["trace"], w["step"], a(w.get("report"), w.get("name") or "-"), fmt_ns(w["dur_ns"]),
                          ratio_text(w.get("ratio")), fmt_ns(w.get("wall_ns")), ", ".join(w["findings"]) or "-"]
                         for w in doc["worst_steps"]], right={1, 3, 4, 5})
               if doc["worst_steps"] else "_No step._")
    out += ["", f"_{STEPS_NOTE}._", "", "## Outliers against the fleet", ""]
    out += [f"- **{f['severity'].upper()}** `{f['id']}` {f['summary']}" for f in doc["outliers"]] or [
        "_No trace stands out._"]
    out += ["", f"_{OUTLIERS_NOTE}._", "", f"## Not analyzed ({len(doc['failed'])})", ""]
    out.append(md_table(["trace", "status", "source", "error"],
                        [[f["trace"], f["status"], f.get("source"), f.get("error") or "-"] for f in doc["failed"]])
               if doc["failed"] else "_Every trace was analyzed._")
    return "\n".join(out) + "\n"
