"""One finding per root cause, with savings that never exceed the time they come from.

Several rules describe the same trouble from different sides: a split-KV-off launch is also a latency spike (its
step broke from the trend), SM idle time (one CTA walks the long request alone) and a tail. Reported side by
side they read as four problems and their savings add up to more than the steps took. `consolidate` links each
*symptom* finding to the *root* finding that explains it (`Finding.supports` on the symptom, `Finding.related`
on the root), then attributes the roots' savings so that, step by step, they never exceed the step's time.

Linking (SYMPTOMS): a symptom attaches to the candidate root of the rules it lists that shares the most steps
with it (same attention kernel when both name one); a latency spike attaches to the finding of the cause it
names. Chains resolve (a spike caused by tail CTAs that are themselves the slow path's: the slow path is the
root). A finding that explains nothing and is explained by nothing is a root of its own.

Attribution (`attribute`): roots in report order (most severe, then largest saving) each claim their saving;
the claim is spread over the root's steps in proportion to what is left of each step's budget and capped by it.
The budget of a step is its wall time for savings inside steps (basis "steps") and the gap before it for
savings between steps (gpu-idle-gaps, basis "span"). So the listed savings never exceed the steps' wall time
plus the time between them, and each basis is bounded on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from traceinsight.diagnose.finding import Finding, sort_findings

SPIKE_ID = "latency-spike"

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

# What a rule's saving is measured against (its module's SAVING_BASIS): time inside steps, or between them.
BASIS_STEPS = "steps"
BASIS_SPAN = "span"
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
    if f.id == SPIKE_ID:
        cause = f.evidence.get("cause")
        cands = [j for j, g in enumerate(findings) if j != i and g.id == cause and g.id != SPIKE_ID]
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


def attribute(claims: Sequence[tuple[int | None, Sequence[int]]], budget: Mapping[int, int],
              total_budget: int | None = None) -> list[int | None]:
    """Bound each claim (saving_ns, steps), in order, by what is left of its steps' budgets (ns per step): a claim
    takes min(claim, what is left over its steps), spread in proportion to what is left of each step, so that
    no step gives more than its budget in all. A claim without steps draws on `total_budget` (what the steps'
    budgets add up to when None). None claims stay None. Pure; the returned list matches `claims`."""
    left = {k: max(0, int(v)) for k, v in budget.items()}
    pool = sum(left.values()) if total_budget is None else max(0, int(total_budget))
    out: list[int | None] = []
    for saving, steps in claims:
        if saving is None:
            out.append(None)
            continue
        want = max(0, int(saving))
        mine = [s for s in dict.fromkeys(steps) if s in left]
        if not mine:
            got = min(want, pool)
            pool -= got
            out.append(got)
            continue
        avail = sum(left[s] for s in mine)
        got = min(want, avail, pool)
        if avail:
            taken = 0
            for s in mine:
                share = left[s] * got // avail
                left[s] -= share
                taken += share
            # Rounding leaves at most len(mine) ns: take it from the first steps that still have some.
            for s in mine:
                if taken >= got:
                    break
                extra = min(left[s], got - taken)
                left[s] -= extra
                taken += extra
            got = taken
        pool -= got
        out.append(got)
    return out


def budgets(steps: Sequence[Any]) -> dict[str, dict[int, int]]:
    """Per basis, each step's budget (ns): its wall time (BASIS_STEPS) and the time between the end of the
    previous step's window and the start of its own (BASIS_SPAN; 0 for the first step, and 0 for a pause of
    the workload, a gap of gpu-idle-gaps' PAUSE_MIN_NS or more, which that rule leaves out too)."""
    from traceinsight.diagnose.rules.gpu_idle_gaps import PAUSE_MIN_NS

    walls: dict[int, int] = {}
    gaps: dict[int, int] = {}
    windows = []
    for s in steps:
        b = getattr(s, "breakdown", None)
        start = b.start_ns if b is not None else s.start_ns
        end = b.end_ns if b is not None else s.end_ns
        walls[s.index] = int(s.wall_ns)
        windows.append((start, end, s.index))
    windows.sort()
    reach: int | None = None
    for start, end, i in windows:
        gap = 0 if reach is None else max(0, start - reach)
        gaps[i] = gap if gap < PAUSE_MIN_NS else 0
        reach = end if reach is None else max(reach, end)
    return {BASIS_STEPS: walls, BASIS_SPAN: gaps}


def consolidate(findings: Sequence[Finding], steps: Sequence[Any]) -> list[Finding]:
    """The findings (in report order) with `ref`, `supports`/`related` (symptoms linked to their root cause) and
    `attributed_ns`/`saving_basis` (each root's saving bounded by the time it comes from) filled in."""
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
    basis_budget = budgets(steps)
    root_idx = [i for i in range(len(ordered)) if roots[i] == i]
    attributed: dict[int, int | None] = {}
    for basis in (BASIS_STEPS, BASIS_SPAN):
        mine = [i for i in root_idx if saving_basis(ordered[i].id) == basis]
        got = attribute([(_claim(i, ordered, roots), ordered[i].steps) for i in mine], basis_budget[basis])
        attributed.update(zip(mine, got, strict=True))
    out = []
    for i, f in enumerate(ordered):
        is_root = roots[i] == i
        out.append(replace(f, ref=refs[i], supports=None if is_root else refs[roots[i]],
                           related=tuple(related.get(i, ())), attributed_ns=attributed.get(i) if is_root else None,
                           saving_basis=saving_basis(f.id)))
    return out


def _claim(i: int, findings: Sequence[Finding], roots: Sequence[int]) -> int | None:
    """What a root claims: its own saving; when it has none, the largest of its symptoms' savings."""
    own = findings[i].saving_ns
    if own is not None:
        return own
    others = [g.saving_ns for j, g in enumerate(findings) if roots[j] == i and j != i and g.saving_ns is not None]
    return max(others) if others else None


def root_findings(findings: Sequence[Any]) -> list[Any]:
    """The findings that are root causes (JSON dicts or `Finding`s), in the order given."""
    def sup(f: Any) -> Any:
        return f.get("supports") if isinstance(f, dict) else getattr(f, "supports", None)

    return [f for f in findings if sup(f) is None]
