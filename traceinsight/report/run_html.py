"""The HTML section of a distributed run (the runs among the documents' "run" keys): a rank × step heatmap of
the time each rank spent waiting for the others in its collectives (shade: the wait's share of the step; the cell
also gives the step's time in collectives), and the collective report (per collective: kind, group, size, each
rank's time / wait, the last-arriving rank), longest wait first. Colours are inline styles: the page needs no
script."""

from __future__ import annotations

import html
from typing import Any

from traceinsight.units import fmt_ns

# Collectives listed in the HTML report (longest wait first).
HTML_MAX_COLLECTIVES = 40


def _esc(v: Any) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def distinct_runs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The distinct runs among the documents' "run" keys (each rank's document holds its run)."""
    seen: list[dict[str, Any]] = []
    for d in docs:
        run = d.get("run")
        if run is not None and all(run != s for s in seen):
            seen.append(run)
    return seen


def straggler_findings(docs: list[dict[str, Any]], run: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's rank-straggler findings as the document of its first rank holds them."""
    first = run["ranks"][0]["rank"]
    return [f for d in docs if d.get("run") == run for f in d.get("findings", [])
            if f.get("id") == "rank-straggler" and f.get("evidence", {}).get("rank") == first]


def runs_html(docs: list[dict[str, Any]]) -> str:
    """The section of every run among `docs` ('' when none)."""
    return "".join(run_html(run, n, straggler_findings(docs, run)) for n, run in enumerate(distinct_runs(docs)))


def _shade(share: float) -> str:
    """A background from white (no wait) to deep amber (the whole step waiting)."""
    share = max(0.0, min(1.0, share))
    g = round(255 - 140 * share)
    b = round(255 - 215 * share)
    return f"background:rgb(255,{g},{b})"


def run_html(run: dict[str, Any], n: int, findings: list[dict[str, Any]]) -> str:
    ranks = [r["rank"] for r in run["ranks"]]
    cells = {(s["step"], s["rank"]): s for s in run["rank_steps"]}
    head = "".join(f'<th class="num">{_esc(s)}</th>' for s in run["steps"])
    rows = []
    for r in ranks:
        tds = []
        for step in run["steps"]:
            s = cells.get((step, r))
            if s is None:
                tds.append('<td class="num">-</td>')
                continue
            share = s["wait_ns"] / s["span_ns"] if s["span_ns"] else 0.0
            tds.append(f'<td class="num" data-rank="{r}" data-step="{_esc(step)}" data-wait-ns="{s["wait_ns"]}" '
                       f'style="{_shade(share * 4)}" title="wait {share:.1%} of the step">'
                       f'<b>{_esc(fmt_ns(s["wait_ns"]))}</b><br><small>{_esc(fmt_ns(s["collective_ns"]))} in '
                       f'collectives · {_esc(fmt_ns(s["span_ns"]))} step</small></td>')
        rows.append(f'<tr><th>rank {r}</th>{"".join(tds)}</tr>')
    heat = (f'<div class="scroll"><table class="heatmap" data-run="{n}"><thead><tr><th>rank \\ step</th>{head}</tr>'
            f'</thead><tbody>{"".join(rows)}</tbody></table></div>')
    colls = sorted(run["collectives"], key=lambda c: -max(x["wait_ns"] for x in c["ranks"]))[:HTML_MAX_COLLECTIVES]
    ch = "".join(f'<th class="num">rank {r}: time / wait</th>' for r in ranks)
    crow = "".join(
        f'<tr><td class="num">{c["index"]}</td><td>{_esc(c["kind"])}</td><td>{_esc(c["group"])}</td>'
        f'<td class="num">{_esc(c["nelems"] if c["nelems"] is not None else "-")}</td><td>{_esc(c["step"])}</td>'
        f'<td class="num">{c["last_rank"]}</td>'
        + "".join(f'<td class="num">{_esc(fmt_ns(x["dur_ns"]))} / {_esc(fmt_ns(x["wait_ns"]))}</td>'
                  for x in c["ranks"]) + "</tr>"
        for c in sorted(colls, key=lambda c: c["index"]))
    coll = (f'<div class="scroll"><table class="collectives"><thead><tr><th class="num">#</th><th>kind</th>'
            f'<th>group</th><th class="num">elements</th><th>step</th><th class="num">last rank</th>{ch}</tr>'
            f'</thead><tbody>{crow}</tbody></table></div>')
    offsets = ", ".join(f"rank {r['rank']} {fmt_ns(r['clock_offset_ns'])}" for r in run["ranks"][1:])
    aligned = ("every rank's collective sequence is the same" if run["sequences_identical"] else
               "some collectives were matched on no other rank: " + ", ".join(
                   f"rank {r['rank']}: {r['unmatched_collectives']} of {r['collectives']} unmatched"
                   for r in run["ranks"]))
    verdict = "".join(f'<p class="note">{_esc(f["severity"])}: {_esc(f["summary"])}</p>' for f in findings) or (
        '<p class="na">rank-straggler: passed (no rank kept the others waiting)</p>')
    return (f'<section id="run{n}" data-section="run"><h2>Run: {len(ranks)} of {run["world_size"]} ranks</h2>'
            f'<p class="meta">{run["collectives_matched"]} collectives matched on every rank; {_esc(aligned)}; clock '
            f'offsets to rank {ranks[0]}: {_esc(offsets)}</p>{verdict}'
            f'<h3>Wait per rank and step</h3>{heat}<h3>Collectives, longest wait first</h3>{coll}</section>\n')
