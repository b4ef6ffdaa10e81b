"""The multi-rank section of a report: the run's ranks (clock offset, collectives matched), the per-rank table
(per step: kernel time by family, time in collectives, wait), the collective report (per collective: kind, group,
size, time and wait per rank, last-arriving rank) and the run's findings. Rendered from the run's document
(`RunAlignment.to_json`, the "run" key of each rank's JSON document), so a saved or piped analysis renders the
same."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from traceinsight.units import fmt_ns

# Collectives listed in the text report (the longest waits first); JSON and `sql` have them all.
TEXT_MAX_COLLECTIVES = 20


def runs_of(analyses: list[Any]) -> list[tuple[dict[str, Any], list[Any]]]:
    """The distinct runs among these analyses' documents (`extra["run"]`), each with its ranks' analyses."""
    out: list[tuple[dict[str, Any], list[Any]]] = []
    for a in analyses:
        run = a.extra.get("run")
        if run is None:
            continue
        for doc, members in out:
            if doc is run:
                members.append(a)
                break
        else:
            out.append((run, [a]))
    return out


def render_run(run: dict[str, Any], findings: list[dict[str, Any]], console: Console,
               max_collectives: int = TEXT_MAX_COLLECTIVES) -> None:
    """The run section, in text."""
    ranks = [r["rank"] for r in run["ranks"]]
    n = run["collectives_matched"]
    aligned = ("every rank's collective sequence is the same" if run["sequences_identical"] else
               "unmatched collectives (lost by a rank's trace): " +
               ", ".join(f"rank {r['rank']}: {r['unmatched_collectives']} of {r['collectives']} unmatched"
                   for r in run["ranks"]))
    console.print(Text(f"Run: {len(ranks)} of {run['world_size']} ranks ({', '.join(map(str, ranks))}); "
                       f"{n} collectives matched on every rank; {aligned}", style="bold"))
    offs = ", ".join(f"rank {r['rank']} {fmt_ns(r['clock_offset_ns'])}" for r in run["ranks"][1:])
    console.print(f"clock offsets to rank {ranks[0]} (from the collectives' ends): {offs}")
    table = Table(title=f"per rank and step ({run['steps_from']})", box=box.SIMPLE_HEAD, title_justify="left")
    families = sorted({f for s in run["rank_steps"] for f in s["busy_ns"]})
    for name, just in [("step", "left"), ("rank", "right"), ("span", "right"),
                       *((f, "right") for f in families), ("in collectives", "right"), ("wait", "right")]:
        table.add_column(name, justify=just)  # type: ignore[arg-type]
    for s in sorted(run["rank_steps"], key=lambda s: (run["steps"].index(s["step"]) if s["step"] in run["steps"]
                                                       else len(run["steps"]), s["rank"])):
        table.add_row(s["step"], str(s["rank"]), fmt_ns(s["span_ns"]),
                      *(fmt_ns(s["busy_ns"].get(f)) if s["busy_ns"].get(f) else "-" for f in families),
                      fmt_ns(s["collective_ns"]), Text(fmt_ns(s["wait_ns"]), style="yellow" if s["wait_ns"] else ""))
    console.print(table)
    if not n:
        console.print("no collective kernel is matched on every rank (none of the ranks' communication kernels "
                      "end together)")
    colls = sorted(run["collectives"], key=lambda c: -max(r["wait_ns"] for r in c["ranks"]))[:max_collectives]
    ct = Table(title=f"collectives ({len(colls)} of {n}, longest wait first)", box=box.SIMPLE_HEAD,
               title_justify="left")
    for name, just in [("#", "right"), ("kind", "left"), ("group", "left"), ("elements", "right"),
                       ("step", "left"), ("last", "right"), *((f"r{r} time / wait", "right") for r in ranks)]:
        ct.add_column(name, justify=just)  # type: ignore[arg-type]
    for c in sorted(colls, key=lambda c: c["index"]):
        ct.add_row(str(c["index"]), c["kind"], c["group"], "-" if c["nelems"] is None else str(c["nelems"]),
                   c["step"], str(c["last_rank"]),
                   *(f"{fmt_ns(r['dur_ns'])} / {fmt_ns(r['wait_ns'])}" for r in c["ranks"]))
    if colls:
        console.print(ct)
    for f in findings:
        console.print(Text(f"{f['severity'].upper():8} ", style="yellow" if f["severity"] == "warning" else ""),
                      Text(f"{f['id']}  {f['summary']}"))
    if not findings:
        console.print("rank-straggler: passed (no rank kept the others waiting in their collectives)")
