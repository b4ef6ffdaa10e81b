"""A self-contained HTML report: inline CSS, plots as inline SVG, no script and no URL, so it opens offline and
can be attached to a postmortem. Sections, in order: verdict, step timeline, latency vs batch size, simulated
per-SM schedule, kernels, thresholds, methods (`SECTIONS`)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from traceinsight import __version__
from traceinsight.report import sections
from traceinsight.units import fmt_ns

if TYPE_CHECKING:  # matplotlib is imported only when a plot is drawn (diff pages need none)
    from traceinsight.report.figures import Gantt


def _figures() -> Any:
    """The plotting module (imports matplotlib on first use)."""
    from traceinsight.report import figures

    return figures

# (data-section id, heading), in report order.
SECTIONS = (
    ("verdict", "Verdict"),
    ("timeline", "Step timeline"),
    ("breakdown", "Where the time went"),
    ("sweep", "Latency vs batch size"),
    ("schedule", "Simulated per-SM schedule"),
    ("kernels", "Kernels"),
    ("thresholds", "Split-KV thresholds"),
    ("methods", "How every number was obtained"),
)

CSS = """
:root { --fg:#1f2933; --muted:#616e7c; --line:#e4e7eb; --bg:#ffffff; --panel:#f5f7fa;
  --crit:#b91c1c; --crit-bg:#fde8e8; --warn:#92400e; --warn-bg:#fef3c7; --info:#1e4e8c; --info-bg:#e0ecfb;
  --ok:#166534; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
  font: 15px/1.5 -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 28px 32px 60px; }
header.report { border-bottom: 3px solid var(--fg); padding-bottom: 12px; margin-bottom: 8px; }
header.report h1 { font-size: 26px; margin: 0 0 4px; letter-spacing: -0.01em; }
.meta { color: var(--muted); font-size: 13.5px; }
.meta b { color: var(--fg); font-weight: 600; }
nav.toc { font-size: 13px; color: var(--muted); margin: 10px 0 18px; }
nav.toc a { color: var(--muted); text-decoration: none; margin-right: 14px; }
nav.toc a:hover { color: var(--fg); text-decoration: underline; }
h2.trace { font-size: 20px; margin: 34px 0 0; padding: 8px 12px; background: var(--panel); border-radius: 6px; }
section { margin: 26px 0 0; }
section > h2 { font-size: 19px; margin: 0 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
p.note, p.caption { color: var(--muted); font-size: 13.5px; margin: 6px 0; }
p.na { color: var(--muted); font-style: italic; background: var(--panel); padding: 10px 14px; border-radius: 6px; }
figure { margin: 6px 0 0; }
figure svg { width: 100%; height: auto; display: block; }
.badge { display: inline-block; min-width: 68px; text-align: center; font-size: 11.5px; font-weight: 700;
  letter-spacing: .04em; text-transform: uppercase; padding: 2px 8px; border-radius: 10px; }
.sev-critical .badge, .badge.sev-critical { background: var(--crit); color: #fff; }
.sev-warning .badge, .badge.sev-warning { background: #d97706; color: #fff; }
.sev-info .badge, .badge.sev-info { background: var(--info); color: #fff; }
ul.verdict { list-style: none; padding: 0; margin: 0; }
ul.verdict > li { border-left: 5px solid var(--line); background: var(--panel); border-radius: 4px;
  margin: 0 0 8px; padding: 8px 12px; }
ul.verdict > li.sev-critical { border-color: var(--crit); background: var(--crit-bg); }
ul.verdict > li.sev-warning { border-color: #d97706; background: var(--warn-bg); }
ul.verdict > li.sev-info { border-color: var(--info); background: var(--info-bg); }
.fid { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace; font-size: 13px; font-weight: 600;
  margin: 0 8px; }
.saving { float: right; font-weight: 700; white-space: nowrap; margin-left: 12px; }
.saving small, small.more { font-weight: 400; color: var(--muted); }
details { margin-top: 6px; font-size: 14px; }
details summary { cursor: pointer; color: var(--muted); font-size: 13px; }
details.checks { margin-top: 10px; }
ul.findings { padding-left: 18px; margin: 4px 0; }
ul.findings > li { margin: 3px 0; }
ul.findings .badge { min-width: 0; font-size: 10px; }
details p { margin: 6px 0; }
dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 6px 0; font-size: 13px; }
dl.kv dt { color: var(--muted); }
dl.kv dd { margin: 0; font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace; word-break: break-word; }
table { border-collapse: collapse; width: 100%; font-size: 13px; margin: 6px 0; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { font-weight: 600; color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .03em;
  border-bottom: 2px solid #cbd2d9; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace; font-size: 12px;
  overflow-wrap: anywhere; min-width: 140px; }
div.scroll { overflow-x: auto; }
tbody tr:nth-child(even) td { background: #fafbfc; }
.off { color: var(--crit); font-weight: 700; }
.on { color: var(--ok); font-weight: 600; }
.up { color: var(--crit); font-weight: 600; }
.down { color: var(--ok); font-weight: 600; }
dl.methods dt { font-weight: 700; margin-top: 10px; }
dl.methods dd { margin: 2px 0 0; color: #323f4b; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; border-top: 1px solid var(--line);
  padding-top: 8px; }
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def page(title: str, body: str) -> str:
    """A complete HTML document around `body`, with the report's CSS inline."""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n{body}\n"
            f"<footer>traceinsight {esc(__version__)}: self-contained report (no network needed). Times are GPU "
            f"times from the trace.</footer>\n</main>\n</body>\n</html>\n")


def table(headers: list[tuple[str, str]], rows: list[list[str]]) -> str:
    """`headers`: (label, css class); `rows`: already escaped cell HTML."""
    head = "".join(f'<th class="{c}">{esc(h)}</th>' for h, c in headers)
    body = "".join("<tr>" + "".join(f'<td class="{c}">{v}</td>' for (_, c), v in zip(headers, r, strict=True))
                   + "</tr>" for r in rows)
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _section(sid: str, prefix: str, inner: str) -> str:
    heading = dict(SECTIONS)[sid]
    return f'<section id="{prefix}{sid}" data-section="{sid}">\n<h2>{esc(heading)}</h2>\n{inner}\n</section>\n'


def _na(text: str) -> str:
    return f'<p class="na">{esc(text)}</p>'


def _svg(fig: Any, alt: str) -> str:
    return f'<figure role="img" aria-label="{esc(alt)}">{_figures().to_svg(fig)}</figure>'


def _split(state: bool | None) -> str:
    return {True: '<span class="on">on</span>', False: '<span class="off">off</span>'}.get(state, "?")  # type: ignore[arg-type]


def _evidence(ev: dict[str, Any]) -> str:
    if not ev:
        return ""
    items = []
    for k, v in ev.items():
        text = v if isinstance(v, str) else json.dumps(v, default=str)
        if len(text) > 300:
            text = text[:300] + " …"
        items.append(f"<dt>{esc(k)}</dt><dd>{esc(text)}</dd>")
    return f'<dl class="kv">{"".join(items)}</dl>'


def _step_list(doc: dict[str, Any], steps: list[int], limit: int = 8) -> str:
    names = {s["index"]: s["name"] for s in doc.get("steps") or []}
    shown = [f"{i} ({esc(names.get(i, '?'))})" for i in steps[:limit]]
    more = f" … and {len(steps) - limit} more" if len(steps) > limit else ""
    return ", ".join(shown) + more


def _finding_item(doc: dict[str, Any], f: dict[str, Any]) -> str:
    """One finding in a list: its severity, its id (the `ref` that names it among its rule's findings, e.g.
    latency-spike#3, else the rule id), its summary, its saving and its steps."""
    sev = f.get("severity") or "info"
    save = f" — saves ≈ {esc(fmt_ns(f['saving_ns']))}" if f.get("saving_ns") else ""
    steps = list(f.get("steps") or [])
    where = f'<br><small class="more">steps ({len(steps)}): {_step_list(doc, steps)}</small>' if steps else ""
    return (f'<li class="sev-{esc(sev)}" data-finding="{esc(f.get("ref") or f.get("id"))}">'
            f'<span class="badge sev-{esc(sev)}">{esc(sev)}</span>'
            f'<span class="fid">{esc(f.get("ref") or f.get("id"))}</span>{esc(f.get("summary"))}{save}{where}</li>')


def verdict_html(doc: dict[str, Any]) -> str:
    """One line per root cause, worst first, with its saving; the details (explanation, remedy, every finding of
    the root cause and every finding that is its evidence, each by its id with its steps) folded under it."""
    why = sections.missing(doc, "findings")
    if why:
        return _na(why) + checks_html(doc)
    items = []
    for g in sections.finding_groups(doc):
        first = g.findings[0]
        save = ""
        if g.saving_ns:
            share = g.share(doc)
            share = f" <small>({esc(share)})</small>" if share else ""
            save = f'<span class="saving">saves ≈ {esc(fmt_ns(g.saving_ns))}{share}</span>'
        more = f' <small class="more">(+{len(g.findings) - 1} more)</small>' if len(g.findings) > 1 else ""
        also = (f'<br><small class="more">evidence: {esc(g.evidence_text())}</small>' if g.related else "")
        detail = []
        if first.get("explanation"):
            detail.append(f"<p>{esc(first['explanation'])}</p>")
        if first.get("remedy"):
            detail.append(f"<p><b>Remedy:</b> {esc(first['remedy'])}</p>")
        roots = "".join(_finding_item(doc, f) for f in g.findings)
        detail.append(f"<p><b>{'This finding' if len(g.findings) == 1 else f'All {len(g.findings)} findings'} of "
                      f'this root cause:</b></p><ul class="findings">{roots}</ul>')
        if g.related:
            ev = "".join(_finding_item(doc, f) for f in g.related)
            detail.append(f"<p><b>Evidence ({len(g.related)} findings of other rules that this cause explains):"
                          f'</b></p><ul class="findings">{ev}</ul>')
        if g.steps:
            detail.append(f"<p><b>Steps ({len(g.steps)}):</b> {_step_list(doc, g.steps)}</p>")
        detail.append(_evidence(first.get("evidence") or {}))
        items.append(
            f'<li class="sev-{esc(g.severity)}">{save}<span class="badge">{esc(g.severity)}</span>'
            f'<span class="fid">{esc(g.id)}</span>{esc(g.summary)}{more}{also}'
            f"<details><summary>why, remedy, findings and evidence</summary>{''.join(detail)}</details></li>")
    return f'<ul class="verdict">{"".join(items)}</ul>' + checks_html(doc)


def checks_html(doc: dict[str, Any]) -> str:
    """The rules that ran and did not fire, with the reason (passed, or not applicable and what they need)."""
    line = sections.checks_line(doc)
    if line is None:
        return ""
    _, rows = sections.checks(doc)
    body = [[f'<span class="fid">{esc(c.get("id"))}</span>', esc(c.get("status")), esc(c.get("reason"))]
            for c in rows if c.get("status") != "fired"]
    inner = table([("rule", ""), ("status", ""), ("why", "")], body) if body else ""
    return f'<details class="checks"><summary>{esc(line)}</summary>{inner}</details>'


def timeline_html(doc: dict[str, Any]) -> str:
    why = sections.missing(doc, "steps")
    if why:
        return _na(why)
    points = sections.timeline(doc)
    spikes = sum(p.spike for p in points)
    fig = _figures().timeline_figure(points, title=f"Step time of {len(points)} steps")
    if not doc.get("findings") and not doc.get("checks"):
        note = "Spikes: not available: needs the diagnostics stage (its latency-spike rule)."
    elif not any(f.get("id") == sections.SPIKE_ID for f in doc.get("findings") or []):
        note = "No spike: no step broke from the trend (latency-spike found nothing)."
    else:
        note = (f"{spikes} spikes marked, coloured by the finding that explains them; grey: steps within the trend.")
    return _svg(fig, "step time per step") + f'<p class="caption">{esc(note)}</p>'


def breakdown_html(doc: dict[str, Any]) -> str:
    why = sections.missing(doc, "steps")
    if why:
        return _na(why)
    rows = sections.incident_rows(doc)
    if not rows:
        return _na("No latency spike to attribute (each step's breakdown is in the JSON: steps[].breakdown).")
    fig = _figures().breakdown_figure(rows)
    body = [[esc(r.label), esc(r.cause),
             esc(f"step {r.onset[0]} (threshold crossed at {r.threshold_step})") if r.onset else "",
             esc(f"{fmt_ns(r.worst_ns)} vs {fmt_ns(r.worst_baseline_ns)} ({r.ratio:.1f}x)"),
             esc(sections.parts_text(r.parts)), esc(r.remedy)] for r in rows]
    caption = ("Each spike's wall time (its range on the host through the end of its GPU work) split into "
               "attention, prefill, the other kernel families and GPU idle (waiting for the host, or on a "
               "synchronisation), against the median of the steps around it; the excess goes to the parts that "
               "grew. `traceinsight explain TRACE --step N` shows one step in full.")
    return (_svg(fig, "step breakdown of each spike against its baseline")
            + f'<p class="caption">{esc(caption)}</p>'
            + table([("incident", ""), ("cause", ""), ("onset", ""), ("worst step", "num"), ("what grew", ""),
                     ("remedy", "")], body))


def sweep_html(doc: dict[str, Any]) -> str:
    panels = sections.sweep(doc)
    if not panels:
        return _na(sections.missing(doc, "sweep") or "")
    notes = []
    for p in panels:
        last_on, first_off = sections.observed_switch(p)
        obs = (f"split-KV observed on up to B={last_on}, off from B={first_off}" if first_off
               else "split-KV state does not change with B")
        th = p.threshold_text
        notes.append(f"<li><b>{esc(p.key)}</b>: {esc(th)}; {esc(obs)}.</li>")
    return (_svg(_figures().sweep_figure(sections.plotted_panels(panels)), "latency vs batch size per distribution")
            + f'<ul class="note">{"".join(notes)}</ul>'
            + '<p class="caption">Median attention time (attention + merge kernels) over the repeated steps of each '
              "case; crosses: split-KV off in every launch of the case"
            + (f"; the figure draws {sections.MAX_SWEEP_PANELS} of the {len(panels)} sweeps listed"
               if len(panels) > sections.MAX_SWEEP_PANELS else "") + ".</p>")


def schedule_html(doc: dict[str, Any], sched: Gantt | str | None) -> str:
    if sched is None or isinstance(sched, str):
        return _na(sched or "not available: needs the schedule model (traceinsight.model.simulate) and a batch "
                   "composition")
    notes = "".join(f"<li>{esc(n)}</li>" for n in sched.notes)
    return _svg(_figures().gantt_figure(sched), sched.title) + (f'<ul class="note">{notes}</ul>' if notes else "")


def kernels_html(doc: dict[str, Any], limit: int = 40) -> str:
    rows = sections.kernel_rows(doc, limit)
    if not rows:
        return _na("not available: no kernel in the trace")
    headers = [("kernel", ""), ("family", ""), ("backend", ""), ("phase", ""), ("count", "num"), ("total", "num"),
               ("mean", "num"), *((c, "num") for c in sections.SPREAD_COLUMNS), ("share", "num"), ("grids", "mono"),
               ("parameters", "mono")]
    body = []
    for k in rows:
        body.append([f'<span title="{esc(k.get("name"))}">{esc(k.get("kernel"))}</span>', esc(k.get("family")),
                     esc(k.get("backend") or "–"), f'<span title="{esc(k.get("phase_evidence"))}">'
                     f'{esc(k.get("phase"))}</span>', esc(k.get("count")), esc(fmt_ns(k.get("total_ns"))),
                     esc(fmt_ns(k.get("mean_ns"))), *(esc(c) for c in sections.spread_cells(k)),
                     f"{(k.get('share') or 0):.1%}", esc(sections.grids_text(k.get("grids"))),
                     esc(sections.params_text(k.get("params")))])
    total = len(doc.get("kernels") or [])
    more = f'<p class="caption">{total - len(rows)} more kernels with less time: see the JSON output.</p>' \
        if total > len(rows) else ""
    return table(headers, body) + more + ('<p class="caption">Hover a kernel for its full name, a phase for its '
                                          "evidence.</p>")


def thresholds_html(doc: dict[str, Any]) -> str:
    why = sections.missing(doc, "thresholds")
    if why:
        return _na(why)
    observed = sections.observed_switches(doc)
    headers = [("kernel", ""), ("backend", ""), ("shape", "mono"), ("KV heads", "num"), ("CTAs / SM", "num"),
               ("max grid", "num"), ("B_th", "num"), ("observed in this trace", "")]
    body = [[f'<span title="{esc(t.get("name"))}">{esc(t.get("kernel"))}</span>' + _variants(t),
             esc(t.get("backend") or "–"), esc(t.get("shape")), esc(t.get("kv_heads")), esc(t.get("occupancy")),
             esc(t.get("max_grid")), f"<b>{esc(t.get('b_threshold'))}</b>" if t.get("b_threshold") else "–",
             esc(observed.get((t.get("kernel"), t.get("backend")), "–"))]
            for t in sections.threshold_rows(doc)]
    return table(headers, body) + ('<p class="caption">B_th: the batch size from which the backend\'s planner '
                                   "turns split-KV off (B × KV heads ≥ max grid).</p>")


def _variants(t: dict[str, Any]) -> str:
    n = t.get("variants") or 1
    return f' <small class="more">({n} template variants)</small>' if n > 1 else ""


def methods_html(doc: dict[str, Any]) -> str:
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in sections.methods(doc))
    return f'<dl class="methods">{items}</dl>'


def trace_header(doc: dict[str, Any]) -> str:
    tr = doc.get("trace") or {}
    gpu = tr.get("gpu") or {}
    steps = doc.get("steps") or []
    kernels = doc.get("kernels") or []
    gpu_text = (gpu.get("name") or "unknown GPU") + (f", {gpu['num_sms']} SMs" if gpu.get("num_sms") else "")
    fmt = (tr.get("format") or "?") + (f" {tr['format_version']}" if tr.get("format_version") else "")
    return (f'<p class="meta"><b>{esc(tr.get("path"))}</b> [{esc(fmt)}]<br>GPU <b>{esc(gpu_text)}</b> · span '
            f"<b>{esc(fmt_ns(tr.get('dur_ns')))}</b> · <b>{sum(k.get('count') or 0 for k in kernels)}</b> kernels "
            f"· <b>{len(steps)}</b> steps, {esc(fmt_ns(sections.total_step_ns(doc)))} in steps</p>"
            + "".join(f'<p class="note">warning: {esc(w)}</p>' for w in tr.get("warnings") or []))


def trace_body(doc: dict[str, Any], sched: Gantt | str | None, prefix: str = "") -> str:
    """The seven sections of one trace."""
    parts = {
        "verdict": verdict_html(doc),
        "timeline": timeline_html(doc),
        "breakdown": breakdown_html(doc),
        "sweep": sweep_html(doc),
        "schedule": schedule_html(doc, sched),
        "kernels": kernels_html(doc),
        "thresholds": thresholds_html(doc),
        "methods": methods_html(doc),
    }
    return "".join(_section(sid, prefix, parts[sid]) for sid, _ in SECTIONS)


def render(docs: list[dict[str, Any]], schedules: Sequence[Gantt | str | None] | None = None) -> str:
    """The HTML report of one or more analysis documents (`report.json_doc.to_json`). `schedules[i]` is the
    Gantt of trace i (a Gantt), or the reason there is none."""
    schedules = schedules or [None] * len(docs)
    if len(docs) == 1:
        doc = docs[0]
        name = (doc.get("trace") or {}).get("path") or "trace"
        toc = " ".join(f'<a href="#{sid}">{esc(h)}</a>' for sid, h in SECTIONS)
        body = (f'<header class="report"><h1>traceinsight report</h1>{trace_header(doc)}</header>'
                f'<nav class="toc">{toc}</nav>' + trace_body(doc, schedules[0]))
        return page(f"traceinsight: {name.rsplit('/', 1)[-1]}", body)
    parts = [f'<header class="report"><h1>traceinsight report: {len(docs)} traces</h1></header>']
    toc = " ".join(f'<a href="#t{i}-verdict">{esc((d.get("trace") or {}).get("path", "?").rsplit("/", 1)[-1])}</a>'
                   for i, d in enumerate(docs))
    parts.append(f'<nav class="toc">{toc}</nav>')
    from traceinsight.report.run_html import runs_html

    parts.append(runs_html(docs))  # the ranks of a distributed run, together (docs/MULTIRANK.md)
    for i, (doc, sched) in enumerate(zip(docs, schedules, strict=True)):
        parts.append(f'<h2 class="trace">Trace {i + 1}</h2>{trace_header(doc)}')
        parts.append(trace_body(doc, sched, prefix=f"t{i}-"))
    return page(f"traceinsight: {len(docs)} traces", "".join(parts))
