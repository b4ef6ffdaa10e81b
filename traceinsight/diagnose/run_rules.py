"""The rules that judge a distributed run as a whole (its ranks aligned, `traceinsight.model.ranks`), and
`attach_runs`, which finds the runs among analyzed traces, aligns them, runs these rules and gives each rank's
analysis the run (`extra["run"]`), the findings and the rules' outcomes. Kept apart from the per-trace catalogue
(`registry.RULES`): a trace analyzed alone is judged as before."""

from __future__ import annotations

import bisect
from dataclasses import replace
from types import ModuleType

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, sort_findings
from traceinsight.diagnose.rule import RuleResult
from traceinsight.diagnose.rules import rank_straggler
from traceinsight.ingest.store import TraceDB
from traceinsight.model.ranks import RunAlignment, align_run, find_runs

RUN_RULES: tuple[ModuleType, ...] = (rank_straggler,)


def run_rules(run: RunAlignment) -> tuple[list[Finding], list[RuleResult]]:
    """Every run rule on `run`: the findings and one outcome per rule."""
    findings: list[Finding] = []
    results: list[RuleResult] = []
    for r in RUN_RULES:
        found = list(r.apply(run))
        findings.extend(found)
        results.append(RuleResult(r.ID, r.NAME, "fired" if found else "passed", "" if found else r.PASSED,
                                  len(found)))
    return findings, results


def steps_holding(a: TraceAnalysis, run: RunAlignment, rank: int, indexes: list[int]) -> tuple[int, ...]:
    """The indexes of `a`'s own steps (its decode steps, on its own clock) in which the collectives `indexes` of
    the run started on `rank`: the last step whose GPU work started at or before the collective (a collective after
    a step's kernels and before the next step's belongs to the step it follows, as a tensor-parallel all-reduce
    does). Where this rank's report shows the time lost to the straggler."""
    if not a.steps or not indexes:
        return ()
    k = run.rank_ids.index(rank)
    off = run.offsets_ns[rank]
    ordered = sorted(a.steps, key=lambda s: s.start_ns)
    starts = [s.start_ns for s in ordered]
    out: set[int] = set()
    for i in indexes:
        j = bisect.bisect_right(starts, run.collectives[i].starts_ns[k] + off) - 1
        if j >= 0:
            out.add(ordered[j].index)
    return tuple(sorted(out))


def for_rank(f: Finding, run: RunAlignment, rank: int, a: TraceAnalysis | None = None) -> Finding:
    """A run finding as one rank's analysis holds it: its saving is the wait on that rank (the straggler's own
    analysis names it and saves nothing itself), its steps that rank's steps the late collectives ran in."""
    straggler = f.evidence.get("straggler_rank")
    if straggler is None:
        return f
    steps = steps_holding(a, run, rank, list(f.evidence.get("collective_indexes", []))) if a is not None else ()
    mine = int(f.evidence.get("wait_by_rank_ns", {}).get(rank, 0))
    who = "this rank" if straggler == rank else f"rank {straggler}"
    summary = (f"{f.summary} [{who} is the straggler]" if straggler == rank
               else f"{f.summary} [this rank (rank {rank}) waited {mine / 1e6:.3g} ms for {who}]")
    return replace(f, summary=summary, saving_ns=None if straggler == rank else mine, steps=steps,
                   evidence={**f.evidence, "rank": rank, "this_rank_wait_ns": mine})


def with_own_findings(f: Finding, run: RunAlignment, ranks: dict[int, TraceAnalysis]) -> Finding:
    """A straggler finding with what the straggler's own analysis found in its steps the late collectives followed
    (split-KV off, a slow path, a host stall, ...): the rank's own cause, named in every rank's report."""
    if f.evidence.get("straggler_rank") is None:
        return f
    straggler = int(f.evidence["straggler_rank"])
    a = ranks.get(straggler)
    if a is None:
        return f
    steps = set(steps_holding(a, run, straggler, list(f.evidence.get("collective_indexes", []))))
    own = sorted({g.id for g in a.findings if g.id != f.id and steps & set(g.steps)})
    if not own:
        return f
    return replace(f, summary=f"{f.summary}; rank {straggler}'s own findings in those steps: {', '.join(own)}",
                   evidence={**f.evidence, "straggler_steps": sorted(steps), "straggler_findings": own},
                   related=tuple(own))


def attach_runs(db: TraceDB, analyses: list[TraceAnalysis]) -> list[RunAlignment]:
    """Align every multi-rank run among `analyses` and attach it to its ranks' analyses; the runs."""
    by_id = {a.trace_id: a for a in analyses}
    runs: list[RunAlignment] = []
    for files in find_runs(db, list(by_id)):
        run = align_run(db, files)
        runs.append(run)
        findings, results = run_rules(run)
        ranks = {f.rank: by_id[f.trace_id] for f in files}
        findings = [with_own_findings(x, run, ranks) for x in findings]
        doc = run.to_json()
        for f in files:
            a = by_id[f.trace_id]
            a.extra["run"] = doc
            a.findings = sort_findings([*a.findings, *(for_rank(x, run, f.rank, a) for x in findings)])
            a.checks = [*a.checks, *results]
            a.cache["run"] = run
    return runs
