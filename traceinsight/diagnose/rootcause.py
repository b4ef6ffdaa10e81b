"""One finding per root cause, with savings that never exceed the time they come from.

Several rules describe the same trouble from different sides: a split-KV-off launch is also a latency spike (its
step broke from the trend), SM idle time (one CTA walks the long request alone) and a tail. Reported side by
side they read as four problems and their savings add up to more than the steps took. `consolidate` links each
*symptom* finding to the *root* finding that explains it (`Finding.supports` on the symptom, `Finding.related`
on the root), then attributes the roots' savings so that, step by step, they never exceed the step's time.

Linking (SYMPTOMS): a symptom attaches to the candidate root of the rules it lists that shares the most steps
with it (same attention kernel when both name one); a latency spike attaches to the finding of the cause it
names, and an incident whose cause no rule explains (host-stall, prefill, kernels:gemm, ...) to the finding
that groups the incidents of that cause (latency-spike's `evidence.group`): incidents of one cause are one root
cause, with the incidents as its evidence. Chains resolve (a spike caused by tail CTAs that are themselves the
slow path's: the slow path is the root). A finding that explains nothing and is explained by nothing is a root
of its own.

Attribution (`attribute`): roots in report order (most severe, then largest saving) each claim their saving,
step by step (`Finding.step_saving_ns`: what the remedy saves in each step, so that the step's time minus it is
the step's reference under the remedy: the balanced split-on launch, the other path's time, the baseline step);
a claim the rule could not place is spread over its steps in proportion to what is left of each. Each step's
claims together are capped by its budget. Inside steps (basis "steps") a step's budget is its wall time minus its
floor, the least it would still take: its time under the remedy that saves it the most (`floors`); remedies are
not added on top of one another, since each reference is the whole step with one remedy applied. Between steps
(gpu-idle-gaps, basis "span") the budget is the gap before the step. So the listed savings never exceed the
steps' time minus their floor plus the time between them, and each basis is bounded on its own.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from traceinsight.diagnose.finding import BASIS_SPAN as BASIS_SPAN  # (defined beside the JSON that splits by them)
from traceinsight.diagnose.finding import BASIS_STEPS as BASIS_STEPS
from traceinsight.diagnose.finding import Finding, sort_findings
from traceinsight.model.int_keys import IntMap, SortedInts, first_of
from traceinsight.model.step_arrays import StepArrays

SPIKE_ID = "latency-spike"
# Findings linked to their root by the cause they name (latency spikes and slow steps).
BY_CAUSE = (SPIKE_ID, "slow-steps")

# Symptom rule -> the rules whose findings can explain it, most likely first.
SYMPTOMS: Mapping[str, tuple[str, ...]] = {
    "sm-idle": ("split-kv-off", "split-kv-starved", "slow-path", "decode-on-prefill-kernel", "tail-ctas",
                "wave-quantization"),
    "tail-ctas": ("split-kv-off", "split-kv-starved", "slow-path", "decode-on-prefill-kernel"),
    "wave-quantization": ("split-kv-off", "split-kv-starved", "slow-path", "decode-on-prefill-kernel", "tail-ctas"),
    "threshold-proximity": ("split-kv-starved", "split-kv-off"),
    "decode-on-prefill-kernel": ("slow-path",),
    "kv-bandwidth": ("slow-path", "decode-on-prefill-kernel", "split-kv-off", "split-kv-starved", "tail-ctas",
                     "sm-idle"),
}

# What a rule's saving is measured against (finding.BASIS_STEPS / BASIS_SPAN, its module's SAVING_BASIS), in words.
BASIS_WORDS = {BASIS_STEPS: "the steps' wall time", BASIS_SPAN: "the idle time between steps"}


def ref(f: Finding, ordinal: int) -> str:
    """A finding's name within its analysis: '<rule id>#<n>' (n counts that rule's findings in report order)."""
    return f"{f.id}#{ordinal}"


def saving_basis(rule_id: str) -> str:
    """BASIS_SPAN for rules whose saving lies between steps (their module's SAVING_BASIS), else BASIS_STEPS."""
    from traceinsight.diagnose.registry import RULE_IDS, rule

    return str(getattr(rule(rule_id), "SAVING_BASIS", BASIS_STEPS)) if rule_id in RULE_IDS else BASIS_STEPS


def _kernel(f: Finding) -> Any:
    return f.evidence.get("kernel")


def _parent(i: int, findings: Sequence[Finding]) -> int | None:
    """The index of the finding that explains findings[i] (None: it is a root or explains itself)."""
    f = findings[i]
    mine = set(f.steps)
    if f.id in BY_CAUSE:
        cause = f.evidence.get("cause")
        # A recurring cause's group: latency-spike's first, then slow-steps' (one root per cause, whichever rule
        # found its incidents); a group itself goes under latency-spike's group of the same cause, if any.
        groups = sorted((j for j, g in enumerate(findings) if j != i and g.id in BY_CAUSE
                         and g.evidence.get("group") and g.evidence.get("cause") == cause),
                        key=lambda j: BY_CAUSE.index(findings[j].id))
        if f.evidence.get("group"):
            return next((j for j in groups if findings[j].id == SPIKE_ID and f.id != SPIKE_ID), None)
        cands = [j for j, g in enumerate(findings) if j != i and g.id == cause and g.id not in BY_CAUSE]
        if not cands:
            return groups[0] if groups else None
    else:
        wanted = SYMPTOMS.get(f.id, ())
        cands = [j for j, g in enumerate(findings) if j != i and g.id in wanted
                 and (_kernel(f) is None or _kernel(g) is None or _kernel(f) == _kernel(g))]
        wanted_rank = {rid: n for n, rid in enumerate(wanted)}
        cands.sort(key=lambda j: wanted_rank[findings[j].id])
    best, best_overlap = None, 0
    for j in cands:
        overlap = len(mine & set(findings[j].steps))
        if overlap > best_overlap:
            best, best_overlap = j, overlap
    return best


def attribute(claims: Sequence[tuple[int | None, Sequence[int]] | tuple[int | None, Sequence[int], Mapping[int, int]]],
              budget: Mapping[int, int], total_budget: int | None = None) -> list[int | None]:
    """Bound each claim (saving_ns, steps[, per_step]), in order, by what is left of its steps' budgets (ns per
    step), so that no step gives more than its budget in all. A claim with `per_step` ({step: ns}) takes in each
    step min(its saving there, what is left of the step); one without takes min(claim, what is left over its
    steps), spread in proportion to what is left of each step. A claim without steps draws on `total_budget`
    (what the steps' budgets add up to when None). None claims stay None. Pure; the returned list matches
    `claims`. What is left of each step is an array over the budget's steps (a long trace has 10^5-10^6)."""
    left = _Budget(budget)
    pool = int(left.left.sum()) if total_budget is None else max(0, int(total_budget))
    out: list[int | None] = []
    for claim in claims:
        saving, steps = claim[0], claim[1]
        per_step = claim[2] if len(claim) > 2 else None
        if saving is None:
            out.append(None)
            continue
        want = max(0, int(saving))
        if per_step:
            placed = IntMap.of(per_step)
            pos, wanted = left.where(placed.keys_, placed.values_)
            # In the claim's order, each step gives min(its saving there, what is left of it) until the claim
            # (or the pool) is met: what the steps before it gave bounds what it may give.
            can = np.minimum(wanted, left.left[pos])
            before = np.cumsum(can) - can
            take = np.minimum(can, np.maximum(0, min(pool, want) - before))
            left.left[pos] -= take
            got = int(take.sum())
            pool -= got
            out.append(got)
            continue
        pos, _ = left.where(_distinct(steps))
        if not len(pos):
            got = min(want, pool)
            pool -= got
            out.append(got)
            continue
        rest = left.left[pos]
        avail = int(rest.sum())
        got = min(want, avail, pool)
        if avail:
            shares = _shares(rest, got, avail)
            have = rest - shares
            # Rounding leaves at most len(mine) ns: take it from the first steps that still have some (each
            # gives what it has until the rest is met).
            need = got - int(shares.sum())
            extra = np.minimum(have, np.maximum(0, need - (np.cumsum(have) - have)))
            left.left[pos] = have - extra
            got = int(shares.sum()) + int(extra.sum())
        pool -= got
        out.append(got)
    return out


# Steps whose share `_shares` computes in Python ints at a time (where h * got overflows int64).
_EXACT_CHUNK = 1 << 16


def _shares(rest: np.ndarray, got: int, avail: int) -> np.ndarray:
    """h * got // avail for each h of `rest` (int64, at least 0; got <= avail), exact: in numpy where h * got fits
    int64, else in Python ints a chunk at a time (a claim over 10^6 steps as Python ints at once took ~0.3 GB)."""
    if not len(rest) or int(rest.max()) <= (2**63 - 1) // max(got, 1):
        out: np.ndarray = rest * got // avail
        return out
    out = np.empty(len(rest), np.int64)
    for a in range(0, len(rest), _EXACT_CHUNK):
        out[a:a + _EXACT_CHUNK] = [h * got // avail for h in rest[a:a + _EXACT_CHUNK].tolist()]
    return out


# ns per step index as two int64 arrays, read-only (`consolidate`'s budgets, floors and what is left of them cover
# every step: 2.3M at 10M kernels, ~1 GB as dicts): a mapping equal to the dict it replaces.
StepBudget = IntMap


class _Budget:
    """What is left of a budget ({step: ns}, or a StepBudget), as arrays: the steps and what is left of each (at
    least 0)."""

    def __init__(self, budget: Mapping[int, int]) -> None:
        self.table = StepBudget.of(budget)
        self.left = np.maximum(self.table.values_, 0)

    def where(self, steps: np.ndarray, values: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The positions of those of `steps` (distinct, int64) that the budget holds, in their order, and their
        `values` (at least 0; zeros when None)."""
        vals = np.zeros(len(steps), np.int64) if values is None else np.maximum(values, 0)
        pos, held = self.table.positions(steps)
        return pos, vals[held]


def _distinct(steps: Sequence[int]) -> np.ndarray:
    """A finding's steps once each, in their order, as int64: its array when it holds one (`SortedInts`: distinct
    already)."""
    return steps.array if isinstance(steps, SortedInts) else np.fromiter(dict.fromkeys(steps), np.int64)


def budgets(steps: Sequence[Any], arrays: StepArrays | None = None) -> dict[str, StepBudget]:
    """Per basis, each step's budget (ns): its wall time (BASIS_STEPS) and the time between the end of the
    previous step's window and the start of its own (BASIS_SPAN; 0 for the first step, and 0 for a pause of
    the workload, a gap of gpu-idle-gaps' PAUSE_MIN_NS or more, which that rule leaves out too). `arrays`: the
    same steps as arrays (`TraceAnalysis.step_arrays`), read instead of the objects (10^5-10^6 steps)."""
    from traceinsight.diagnose.rules.gpu_idle_gaps import PAUSE_MIN_NS

    n = len(steps)
    if arrays is not None and arrays.n == n:
        index = np.asarray(arrays.index, np.int64)
        start, end = arrays.window_start, arrays.window_end
        wall = end - start
    else:
        index = np.fromiter((s.index for s in steps), np.int64, n)
        windows = [b if (b := getattr(s, "breakdown", None)) is not None else s for s in steps]
        start = np.fromiter((w.start_ns for w in windows), np.int64, n)
        end = np.fromiter((w.end_ns for w in windows), np.int64, n)
        wall = np.fromiter((s.wall_ns for s in steps), np.int64, n)
    # The windows in (start, end, index) order; each gap from the furthest end of the windows before it.
    order = np.lexsort((index, end, start))
    reach = np.maximum.accumulate(end[order])
    gap = np.zeros(n, np.int64)
    if n > 1:
        gap[1:] = np.maximum(0, start[order][1:] - reach[:-1])
    gap[gap >= PAUSE_MIN_NS] = 0
    return {BASIS_STEPS: StepBudget.last_of(index, wall), BASIS_SPAN: StepBudget.last_of(index[order], gap)}


def consolidate(findings: Sequence[Finding], steps: Sequence[Any], arrays: StepArrays | None = None
                ) -> list[Finding]:
    """The findings (in report order) with `ref`, `supports`/`related` (symptoms linked to their root cause) and
    `attributed_ns`/`saving_basis` (each root's saving bounded by the time it comes from) filled in. `arrays`:
    the steps as arrays, when the analysis has them (`budgets`)."""
    ordered = sort_findings(findings)
    counts: dict[str, int] = {}
    refs = []
    for f in ordered:
        counts[f.id] = counts.get(f.id, 0) + 1
        refs.append(ref(f, counts[f.id]))
    parent = [_parent(i, ordered) for i in range(len(ordered))]

    def root_of(i: int) -> int:
        seen = {i}
        while parent[i] is not None:
            nxt = parent[i]
            assert nxt is not None
            if nxt in seen:  # a cycle cannot happen with SYMPTOMS as declared; stop rather than loop
                break
            seen.add(nxt)
            i = nxt
        return i

    roots = [root_of(i) for i in range(len(ordered))]
    related: dict[int, list[str]] = {}
    for i, r in enumerate(roots):
        if r != i:
            related.setdefault(r, []).append(refs[i])
    basis_budget = budgets(steps, arrays)
    root_idx = [i for i in range(len(ordered)) if roots[i] == i]
    claims = {i: _claim(i, ordered, roots) for i in root_idx}
    walls = basis_budget[BASIS_STEPS]
    in_steps = [i for i in root_idx if saving_basis(ordered[i].id) == BASIS_STEPS]
    floor = floors(walls, [(claims[i][0], ordered[i].steps, claims[i][1]) for i in in_steps])
    basis_budget[BASIS_STEPS] = StepBudget(walls.keys_, walls.values_ - floor.values_)
    attributed: dict[int, int | None] = {}
    for basis in (BASIS_STEPS, BASIS_SPAN):
        mine = [i for i in root_idx if saving_basis(ordered[i].id) == basis]
        got = attribute([(claims[i][0], ordered[i].steps, claims[i][1]) for i in mine], basis_budget[basis])
        attributed.update(zip(mine, got, strict=True))
    out = []
    for i, f in enumerate(ordered):
        is_root = roots[i] == i
        out.append(_linked(f, ref=refs[i], supports=None if is_root else refs[roots[i]],
                           related=tuple(related.get(i, ())), attributed_ns=attributed.get(i) if is_root else None,
                           saving_basis=saving_basis(f.id)))
    return out


def _linked(f: Finding, **links: Any) -> Finding:
    """`dataclasses.replace(f, **links)` for the fields consolidation fills in, without normalizing the finding's
    steps and step savings again (`Finding.__post_init__`: they already are; a finding may name 10^5 steps, held
    as arrays, which the copy shares)."""
    out = copy.copy(f)
    for name, value in {**links, "evidence": dict(f.evidence)}.items():
        object.__setattr__(out, name, value)
    return out


def _claim(i: int, findings: Sequence[Finding], roots: Sequence[int]) -> tuple[int | None, Mapping[int, int]]:
    """What a root claims, in all and step by step: its own saving; when it has none, the largest of its
    symptoms' savings."""
    own = findings[i]
    if own.saving_ns is not None and own.id in BY_CAUSE and own.evidence.get("group"):
        # A recurring cause: its incidents, and those of the other rule's findings it holds (slow steps under a
        # spike group, or a lone spike under a slow-steps group), step by step.
        # Its own steps' savings, then each held finding's steps not yet seen (as dict.setdefault would), as arrays.
        held = [IntMap.of(g.step_saving_ns) for j, g in enumerate(findings)
                if roots[j] == i and j != i and g.id in BY_CAUSE]
        per_step = first_of(IntMap.of(own.step_saving_ns), *held)
        return int(per_step.values_.sum()), per_step
    if own.saving_ns is not None:
        return own.saving_ns, own.step_saving_ns
    others = [g for j, g in enumerate(findings) if roots[j] == i and j != i and g.saving_ns is not None]
    if not others:
        return None, {}
    best = max(others, key=lambda g: g.saving_ns or 0)
    return best.saving_ns, best.step_saving_ns


def step_claims(saving_ns: int | None, steps: Sequence[int], per_step: Mapping[int, int],
                walls: Mapping[int, int]) -> dict[int, int]:
    """What a claim takes from each of its steps before any bound: `per_step` where the rule placed its saving,
    else the saving spread over its steps in proportion to their wall time; never more than a step's wall
    time."""
    if saving_ns is None:
        return {}
    if per_step:
        return {s: min(max(0, int(v)), walls[s]) for s, v in per_step.items() if s in walls}
    mine = [s for s in dict.fromkeys(steps) if s in walls]
    total = sum(walls[s] for s in mine)
    if not total:
        return {}
    rate = min(1.0, max(0, int(saving_ns)) / total)
    return {s: int(walls[s] * rate) for s in mine}


def floors(walls: Mapping[int, int], claims: Sequence[tuple[int | None, Sequence[int], Mapping[int, int]]]
           ) -> StepBudget:
    """Each step's floor (ns): the least it would still take with a remedy applied, its wall time minus the
    largest saving any root cause claims in it (a step no root names keeps its wall time). Remedies are not
    stacked: each claim's reference is the whole step with that one remedy. Pure; over arrays of the steps
    (`step_claims` one step at a time)."""
    table = _Budget(walls)
    wall = table.table.values_
    best = np.zeros(len(wall), np.int64)
    for saving, steps, per_step in claims:
        if saving is None:
            continue
        if per_step:
            placed = IntMap.of(per_step)
            pos, wanted = table.where(placed.keys_, placed.values_)
            claim = np.minimum(wanted, wall[pos])
        else:
            pos, _ = table.where(_distinct(steps))
            total = int(wall[pos].sum())
            if not total:
                continue
            rate = min(1.0, max(0, int(saving)) / total)
            claim = (wall[pos] * rate).astype(np.int64)
        best[pos] = np.maximum(best[pos], claim)
    return StepBudget(table.table.keys_, wall - np.minimum(wall, best))


def step_floors(findings: Sequence[Finding], steps: Sequence[Any]) -> StepBudget:
    """The floor of every step (`floors`) from consolidated findings: the root causes whose saving lies inside
    steps."""
    walls = budgets(steps)[BASIS_STEPS]
    ordered = list(findings)
    refs = {f.ref: j for j, f in enumerate(ordered)}
    roots = [refs.get(f.supports, j) if f.supports is not None else j for j, f in enumerate(ordered)]
    claims = []
    for j, f in enumerate(ordered):
        if roots[j] == j and saving_basis(f.id) == BASIS_STEPS:
            saving, per_step = _claim(j, ordered, roots)
            claims.append((saving, f.steps, per_step))
    return floors(walls, claims)
