"""The HTML section of a distributed run (the runs among the documents' "run" keys): a rank × step heatmap of
the time each rank spent waiting for the others in its collectives (shade: the wait's share of the step; the cell
also gives the step's time in collectives), and the collective report (per collective: kind, group, size, each
rank's time / wait, the last-arriving rank), longest wait first. Colours are inline styles: the page needs no
script. Laid out by templates/run.html.j2."""

from __future__ import annotations

from typing import Any

from traceinsight.units import fmt_ns

# Collectives listed in the HTML report (longest wait first).
HTML_MAX_COLLECTIVES = 40


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


def runs_view(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The view of every run among `docs` (`run_view`; none when no document holds a run)."""
    return [run_view(run, n, straggler_findings(docs, run)) for n, run in enumerate(distinct_runs(docs))]


def _shade(share: float) -> str:
    """A background from white (no wait) to deep amber (the whole step waiting)."""
    share = max(0.0, min(1.0, share))
    g = round(255 - 140 * share)
    b = round(255 - 215 * share)
    return f"background:rgb(255,{g},{b})"


def run_view(run: dict[str, Any], n: int, findings: list[dict[str, Any]]) -> dict[str, Any]:
    """What the run's section shows: the heatmap's cells (None where a rank has no such step), the collectives
    (the HTML_MAX_COLLECTIVES with the longest wait, in their order), clock offsets and alignment."""
    ranks = [r["rank"] for r in run["ranks"]]
    cells = {(s["step"], s["rank"]): s for s in run["rank_steps"]}
    heat = []
    for r in ranks:
        row: list[dict[str, Any] | None] = []
        for step in run["steps"]:
            s = cells.get((step, r))
            if s is None:
                row.append(None)
                continue
            share = s["wait_ns"] / s["span_ns"] if s["span_ns"] else 0.0
            row.append({"step": step, "wait_ns": s["wait_ns"], "style": _shade(share * 4), "share": f"{share:.1%}",
                        "wait": fmt_ns(s["wait_ns"]), "collective": fmt_ns(s["collective_ns"]),
                        "span": fmt_ns(s["span_ns"])})
        heat.append((r, row))
    colls = sorted(run["collectives"], key=lambda c: -max(x["wait_ns"] for x in c["ranks"]))[:HTML_MAX_COLLECTIVES]
    collectives = [{**c, "nelems": c["nelems"] if c["nelems"] is not None else "-", "last_rank": str(c["last_rank"])}
                   for c in sorted(colls, key=lambda c: c["index"])]
    offsets = ", ".join(f"rank {r['rank']} {fmt_ns(r['clock_offset_ns'])}" for r in run["ranks"][1:])
    aligned = ("every rank's collective sequence is the same" if run["sequences_identical"] else
               "some collectives were matched on no other rank: " + ", ".join(
                   f"rank {r['rank']}: {r['unmatched_collectives']} of {r['collectives']} unmatched"
                   for r in run["ranks"]))
    return {"n": n, "ranks": ranks, "world_size": run["world_size"], "matched": run["collectives_matched"],
            "aligned": aligned, "offsets": offsets, "findings": findings, "steps": run["steps"], "heat": heat,
            "collectives": collectives}
