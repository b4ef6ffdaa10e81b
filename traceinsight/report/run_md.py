"""The Markdown section of a distributed run (the runs among the documents' "run" keys): ranks and clock offsets,
wait per rank and step, the collective report (longest wait first) and the straggler, as report/run_html.py
gives them in HTML."""

from __future__ import annotations

from typing import Any

from traceinsight.report.md_table import md_table
from traceinsight.report.run_html import HTML_MAX_COLLECTIVES, distinct_runs, straggler_findings
from traceinsight.units import fmt_ns


def runs_md(docs: list[dict[str, Any]]) -> str:
    """The section of every run among `docs` ('' when none)."""
    return "".join(run_md(run, straggler_findings(docs, run)) for run in distinct_runs(docs))


def run_md(run: dict[str, Any], findings: list[dict[str, Any]]) -> str:
    ranks = [r["rank"] for r in run["ranks"]]
    parts = [f"## Run: {len(ranks)} of {run['world_size']} ranks", "",
             f"{run['collectives_matched']} collectives matched on every rank; every rank's sequence the same: "
             f"{'yes' if run['sequences_identical'] else 'no'}.", ""]
    parts += [md_table(["rank", "file", "collectives", "unmatched", "clock offset"],
                       [[r["rank"], r["path"].rsplit("/", 1)[-1], r["collectives"], r["unmatched_collectives"],
                         fmt_ns(r["clock_offset_ns"])] for r in run["ranks"]], right={0, 2, 3, 4}), ""]
    cells = {(s["step"], s["rank"]): s for s in run["rank_steps"]}
    parts += ["Wait per rank and step (time in collectives in brackets):", "",
              md_table(["rank", *run["steps"]],
                       [[r, *(f"{fmt_ns(c['wait_ns'])} ({fmt_ns(c['collective_ns'])})"
                              if (c := cells.get((st, r))) else "-" for st in run["steps"])] for r in ranks],
                       right=set(range(len(run["steps"]) + 1))), ""]
    colls = sorted(run["collectives"], key=lambda c: -max(x["wait_ns"] for x in c["ranks"]))[:HTML_MAX_COLLECTIVES]
    if colls:
        parts += [md_table(["#", "kind", "group", "elements", "step", "last rank",
                            *(f"rank {r}: time / wait" for r in ranks)],
                           [[c["index"], c["kind"], c["group"], "-" if c["nelems"] is None else c["nelems"],
                             c["step"], c["last_rank"],
                             *(f"{fmt_ns(x['dur_ns'])} / {fmt_ns(x['wait_ns'])}" for x in c["ranks"])]
                            for c in sorted(colls, key=lambda c: c["index"])],
                           right={0, 3, 5, *range(6, 6 + len(ranks))}), ""]
    parts += [f"**{f['severity']}** `rank-straggler` {f['summary']}" for f in findings] or [
        "`rank-straggler`: passed (no rank kept the others waiting)"]
    return "\n".join([*parts, "", ""])
