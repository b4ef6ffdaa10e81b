"""rank-straggler: one rank of a distributed run arrives last at its collectives and the others wait for it.

A collective finishes on every rank when the last rank has arrived, so each other rank's kernel spends the
difference waiting (`traceinsight.model.ranks`: wait = last arrival - own arrival, bounded by the kernel). A rank
is a straggler when the waits it causes (the other ranks' waits in the collectives it arrived last at) are at
least STRAGGLER_MIN_FRACTION of all the waiting in the run and at least CAUSED_MIN_NS. What made it late is what it
ran between the previous collective and this one: its kernel time by family and its GPU idle ('host'), against
the median of the other ranks over the same collectives; the part that grew most is the cause. A stall common to
all ranks delays every arrival alike: no rank waits, nothing fires.

A run-level rule: `apply` takes the aligned run (`RunAlignment`), not one trace's analysis, and runs only when
several ranks of one run are analyzed together (`traceinsight.diagnose.run_rules`).
"""

from __future__ import annotations

import statistics

from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.model.ranks import Collective, RunAlignment
from traceinsight.units import fmt_ns

ID = "rank-straggler"
NAME = "Straggling rank"
DESCRIPTION = "One rank arrives last at the run's collectives; the other ranks wait inside them for it."
PASSED = "no rank kept the others waiting in their collectives"
NEEDS = ()
OPTIONAL = ()

# A collective counts for lateness when some rank waited at least this long in it (ns): below, arrival jitter.
WAIT_MIN_NS = 50_000
# A straggler caused at least this much waiting in all (ns) ...
CAUSED_MIN_NS = 1_000_000
# ... and at least this share of all the waiting in the run.
STRAGGLER_MIN_FRACTION = 0.25
# Warning (else info) when the waits it caused are at least this share of the other ranks' time in collectives.
WARNING_WAIT_FRACTION = 0.2


def late_collectives(run: RunAlignment, rank: int) -> list[Collective]:
    """The collectives `rank` arrived last at while some other rank waited at least WAIT_MIN_NS."""
    return [c for c in run.collectives if c.last_rank == rank and max(c.waits_ns) >= WAIT_MIN_NS]


def caused_wait_ns(run: RunAlignment, rank: int) -> int:
    """The other ranks' waiting in the collectives `rank` arrived last at (ns): the straggler's saving."""
    k = run.rank_ids.index(rank)
    return sum(sum(w for j, w in enumerate(c.waits_ns) if j != k) for c in late_collectives(run, rank))


def growth_ns(run: RunAlignment, rank: int, late: list[Collective]) -> dict[str, int]:
    """Per component, how much more of it `rank` ran before the collectives in `late` than the median other rank
    (ns, summed over them; components absent on a rank count 0)."""
    k = run.rank_ids.index(rank)
    out: dict[str, int] = {}
    for c in late:
        comps = {name for b in c.before for name in b}
        for name in comps:
            others = [b.get(name, 0) for j, b in enumerate(c.before) if j != k]
            out[name] = out.get(name, 0) + int(c.before[k].get(name, 0) - statistics.median(others))
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def apply(run: RunAlignment) -> list[Finding]:
    total_wait = sum(sum(c.waits_ns) for c in run.collectives)
    findings: list[Finding] = []
    for rank in run.rank_ids:
        caused = caused_wait_ns(run, rank)
        if caused < CAUSED_MIN_NS or caused < STRAGGLER_MIN_FRACTION * total_wait:
            continue
        late = late_collectives(run, rank)
        k = run.rank_ids.index(rank)
        others_coll = sum(sum(d for j, d in enumerate(c.durs_ns) if j != k) for c in run.collectives)
        grew = growth_ns(run, rank, late)
        cause, cause_ns = next(iter(grew.items()), ("unknown", 0))
        steps = sorted({c.step for c in late}, key=run.steps.index if all(c.step in run.steps for c in late)
                       else str)
        kinds = sorted({c.kind for c in late})
        severity = Severity.WARNING if others_coll and caused >= WARNING_WAIT_FRACTION * others_coll else Severity.INFO
        why = (f"its {cause} time grew by {fmt_ns(cause_ns)} against the other ranks before those collectives"
               if cause_ns > 0 else "no part of its work before them grew against the other ranks")
        findings.append(Finding(
            id=ID, severity=severity, steps=(),
            summary=(f"rank {rank} arrived last at {len(late)} of {len(run.collectives)} collectives "
                     f"({', '.join(kinds)}; {_steps_text(steps)}): the other ranks waited {fmt_ns(caused)}; "
                     f"{why}"),
            evidence={"straggler_rank": rank, "late_collectives": len(late), "collectives": len(run.collectives),
                      "caused_wait_ns": caused, "run_wait_ns": total_wait, "others_collective_ns": others_coll,
                      "cause": cause, "cause_growth_ns": cause_ns, "growth_ns": grew, "steps": steps,
                      "wait_by_rank_ns": {r: sum(c.waits_ns[j] for c in late) for j, r in enumerate(run.rank_ids)},
                      "collective_indexes": [c.index for c in late]},
            explanation=(f"In a collective every rank finishes when the last one has arrived. Rank {rank} started "
                         f"its collective kernels last, so the other ranks sat inside theirs waiting "
                         f"({fmt_ns(caused)} in all, {caused / total_wait:.0%} of all the waiting in the run): on "
                         "those ranks the time looks like slow communication, but it is rank "
                         f"{rank}'s work before the collective: {why}."),
            remedy=_remedy(cause, rank),
            saving_ns=caused,
        ))
    return findings


def _steps_text(steps: list[str]) -> str:
    if len(steps) <= 3:
        return ", ".join(steps)
    return f"{', '.join(steps[:3])} and {len(steps) - 3} more steps"


def _remedy(cause: str, rank: int) -> str:
    if cause == "host":
        return (f"Rank {rank}'s GPU sat idle before the collectives: its host was late (Python, scheduling, data "
                "loading, a synchronisation). Look at that rank's host ops in those steps (traceinsight explain), "
                "and balance what the host does per rank.")
    if cause == "attention":
        return (f"Rank {rank}'s attention ran longer than the other ranks': a longer request or a larger batch on "
                "that rank (data-parallel attention), or split-KV off there. Balance KV tokens across ranks; see "
                "that rank's own findings.")
    if cause in ("gemm", "moe"):
        return (f"Rank {rank} did more {cause.upper() if cause == 'gemm' else 'expert'} work than the others: "
                "unbalanced shards or expert load. Balance the work per rank.")
    return (f"Rank {rank}'s work before the collectives took longer than the other ranks' ({cause}). Balance the "
            "work per rank, or overlap it with the communication.")
