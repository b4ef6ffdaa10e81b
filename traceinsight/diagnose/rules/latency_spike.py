"""latency-spike: the postmortem. Steps whose time breaks from the trend, each attributed to what grew.

A step's time is its wall time (`traceinsight.model.breakdown`: its range on the host through the end of its
GPU work). The series, the trend and each component's baseline come from `traceinsight.diagnose.attribution`:
a spike is a step at least SPIKE_RATIO times its baseline and EXCESS_MIN_NS above it, and its excess is split
over the components of the step that grew against the steps around it (HALF_WINDOW_STEPS either side).

The cause is the component that grew the most, named:
- attention: the attention rule whose finding covers the step (ATTENTION_CAUSES, most specific first), else
  `attention`. An attention rule is never the cause of a step whose attention time did not grow;
- prefill work (a prefill or mixed launch in the step): `prefill`;
- GPU idle while the host was late: `host-stall` (mostly in long stretches) or `host-launch-bound` (many short
  ones, launch overhead); idle with work already launched: `gpu-wait`; idle the trace cannot explain: `gpu-idle`;
- any other kernel family: `kernels:<family>`.
Consecutive spikes with the same cause form one incident, which starts at its onset: the steps just before it
in which the cause's component already jumped (SPIKE_RATIO times its own baseline), even if the step's total
did not yet cross the threshold. A long trace can hold thousands of incidents: the MAX_INCIDENTS with the most
excess time are findings of their own, the others are folded into one finding per cause.

Its selection stays in Python and numpy (`traceinsight.diagnose.baseline.fit_spikes`, `attribution`): the test
itself is one line (step >= SPIKE_RATIO x baseline and >= EXCESS_MIN_NS above it), but the baseline it reads is
fitted on the steps not yet flagged (Theil-Sen trend in tokens, or rolling quantiles over step order), refitted
without the spikes each round finds until the flags stop changing: the flags are an input of the statistic, so
the selection cannot be a filter over a baseline column computed first. What follows it (runs of spikes with one
cause, each cause from the attention findings and the component that grew) is wording, not selection.
"""

from __future__ import annotations

import itertools
import tomllib
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from traceinsight.components import IDLE, IDLE_HOST
from traceinsight.diagnose import attribution, remedies
from traceinsight.diagnose.attribution import ATTRIBUTION, SeriesPart, StepAttribution, Table
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.host import HOST_RANGES, describe, host_evidence, read_ops
from traceinsight.diagnose.rule import Input, limit
from traceinsight.diagnose.views import step_ranges
from traceinsight.model.steps import ATTENTION, Step
from traceinsight.units import fmt_ns

ID = "latency-spike"
NAME = "Latency spikes (postmortem)"
DESCRIPTION = "Steps whose time breaks from the trend of the step series, attributed to the part of the step that grew."
PASSED = "no step broke from the trend of its series"
NEEDS = (Input.STEPS,)
OPTIONAL = (Input.SIDECAR,)
# Which attention finding explains grown attention time, most specific first.
ATTENTION_CAUSES = ("split-kv-off", "split-kv-starved", "tail-ctas", "sm-idle", "wave-quantization", "slow-path",
                    "kv-bandwidth")
# Rules whose findings this rule reads: the attention causes (KNOWN_SLOW, left out of the fit, is among them).
READS = ATTENTION_CAUSES
USES = (ATTRIBUTION, HOST_RANGES)



def _thresholds() -> dict[str, float]:
    """The slow-step and spike thresholds, data in one place (traceinsight/diagnose/slow_steps.toml)."""
    raw = tomllib.loads(resources.files("traceinsight.diagnose").joinpath("slow_steps.toml").read_text())
    return {k: float(v) for k, v in raw.items()}


THRESHOLDS = _thresholds()
# A spike takes at least this many times its baseline (slow_steps.toml: spike_ratio)...
SPIKE_RATIO = THRESHOLDS["spike_ratio"]
# ...and at least this much longer (ns).
EXCESS_MIN_NS = 50_000
# Rolling baseline: steps on each side of the window (a run of spikes longer than this is a new level).
HALF_WINDOW_STEPS = 50
# An incident whose worst step is at least this many times its baseline is critical (else a warning).
CRITICAL_RATIO = 5.0
# Steps named by findings of these rules are left out of the baseline fit (they are slow for a known reason; a
# long bad stretch must not become the trend), though still judged against it.
KNOWN_SLOW = ("split-kv-off", "split-kv-starved")
# The baseline is fitted on all steps when fewer than this many remain after leaving the known-slow ones out.
MIN_FIT_STEPS = 5
# Incidents reported one by one (those with the most excess time); the rest are folded per cause.
MAX_INCIDENTS = 20
# Components listed in an incident's attribution at most (the largest).
MAX_PARTS = 6
# Causes on the host side (their evidence names what the host did while the GPU waited).
HOST_CAUSES = (attribution.HOST_STALL, attribution.HOST_LAUNCH_BOUND)
# Incidents of one cause that no other rule explains become one root-cause finding from this many on.
GROUP_MIN_INCIDENTS = 2
# Baseline steps a host op's usual time is taken over (the nearest non-spike steps of the series).
HOST_BASELINE_STEPS = 10


def attributions(ctx: TraceAnalysis) -> Table:
    """Every step judged against its series with this rule's thresholds (also what `explain` shows)."""
    known_slow = {s for f in ctx.findings if f.id in KNOWN_SLOW for s in f.steps}
    return attribution.table(
        ctx,
        ratio=limit(ctx, ID, "SPIKE_RATIO", SPIKE_RATIO),
        min_excess_ns=limit(ctx, ID, "EXCESS_MIN_NS", EXCESS_MIN_NS),
        half_window=int(limit(ctx, ID, "HALF_WINDOW_STEPS", HALF_WINDOW_STEPS)),
        min_fit=MIN_FIT_STEPS,
        known_slow=known_slow,
    )


def cause_of(att: StepAttribution, component: str | None,
             by_step: dict[int, list[Finding]]) -> tuple[str, Finding | None]:
    """The cause id of a step whose `component` grew the most, and the finding behind it (attention only)."""
    if component is None:
        return "unexplained", None
    if component == ATTENTION:
        found = by_step.get(att.step, [])
        for cid in ATTENTION_CAUSES:
            for f in found:
                if f.id == cid:
                    return cid, f
        return "attention", None
    return attribution.component_cause(component, att), None


class Causes:
    """`cause_of` for many steps at once: the attention finding that explains each step (ATTENTION_CAUSES, most
    specific first; of one rule, the first finding), looked up in an array over the table's step indexes."""

    def __init__(self, findings: list[Finding], table: Table) -> None:
        self.findings = [f for f in findings if f.id in ATTENTION_CAUSES]
        self.lo, size = table.span()
        self.best = np.full(size, -1, np.int64)
        rank = {cid: i for i, cid in enumerate(ATTENTION_CAUSES)}
        # The least specific first, so that the most specific (then the first) finding is written last.
        for i in sorted(range(len(self.findings)), key=lambda i: (-rank[self.findings[i].id], -i)):
            at = np.asarray(self.findings[i].steps, np.int64) - self.lo
            self.best[at[(at >= 0) & (at < size)]] = i

    def of(self, part: SeriesPart, rows: np.ndarray, components: list[str | None]
           ) -> tuple[list[str], list[Finding | None]]:
        """The cause id of each row of `part` whose `components` grew the most, and the finding behind it."""
        n = len(rows)
        cause = np.empty(n, object)
        finding = np.full(n, None, object)
        index = {c: i for i, c in enumerate(dict.fromkeys(components))}  # in first-seen order
        codes = np.fromiter(map(index.__getitem__, components), np.int64, n)
        d = part.data
        for c, k in index.items():
            mine = codes == k
            if c is None:
                cause[mine] = "unexplained"
            elif c == ATTENTION:
                fi = self.best[part.steps[rows[mine]] - self.lo]
                ids = np.array([f.id for f in self.findings] + ["attention"], object)
                cause[mine] = ids[fi]
                finding[mine] = np.array([*self.findings, None], object)[fi]
            elif c == IDLE_HOST:
                j = d.names.index(c)
                r = rows[mine]
                grew = d.values[r, j] - d.bases[r, j]
                stall = (grew > 0) & (part.long_delta[r] >= attribution.STALL_SHARE * grew)
                cause[mine] = np.where(stall, attribution.HOST_STALL, attribution.HOST_LAUNCH_BOUND)
            else:
                cause[mine] = attribution.COMPONENT_CAUSES.get(c, f"kernels:{c}")
        return cause.tolist(), finding.tolist()


@dataclass
class Incident:
    cause: str
    component: str | None
    finding: Finding | None
    steps: list[int] = field(default_factory=list)  # spike steps, in series order
    onset: list[int] = field(default_factory=list)  # steps before them where the component already jumped


def incidents(ctx: TraceAnalysis) -> tuple[list[Incident], Table]:
    """The trace's incidents (runs of spikes with one cause, with their onset steps) and every step's
    attribution. Over the table's arrays: only the spikes' causes are named, a run at a time."""
    table = attributions(ctx)
    ratio = limit(ctx, ID, "SPIKE_RATIO", SPIKE_RATIO)
    excess_min = limit(ctx, ID, "EXCESS_MIN_NS", EXCESS_MIN_NS)
    causes = Causes(ctx.findings, table)
    # Per part, its spikes' components, causes and findings (by row).
    named: list[dict[int, tuple[str | None, str, Finding | None]]] = []
    for p in table.parts:
        rows = np.flatnonzero(p.spike)
        comps = p.components(rows) if len(rows) else []
        cause, finding = causes.of(p, rows, comps)
        named.append(dict(zip(rows.tolist(), zip(comps, cause, finding, strict=True), strict=True)))
    out: list[Incident] = []
    # Per series, its steps' part, row, spike flag and step index as arrays; Python values only for the spikes and
    # the onset steps walked back from them (a long trace has 10^6 steps, and a Python int per step adds up).
    for _, (part, row) in sorted(table.series_rows().items(), key=lambda kv: kv[0]):
        spike = np.zeros(len(part), bool)
        step_of = np.zeros(len(part), np.int64)
        for k, p in enumerate(table.parts):
            mine = part == k
            if mine.any():
                spike[mine] = p.spike[row[mine]]
                step_of[mine] = p.steps[row[mine]]
        current: Incident | None = None
        last = -2
        at = np.flatnonzero(spike)
        for pos, k, r, step in zip(at.tolist(), part[at].tolist(), row[at].tolist(), step_of[at].tolist(),
                                   strict=True):
            component, cause, finding = named[k][r]
            if current is not None and last == pos - 1 and current.cause == cause:
                current.steps.append(step)
                last = pos
                continue
            last = pos
            current = Incident(cause, component, finding, [step])
            if component is not None:
                j = pos - 1
                while j >= 0 and not spike[j] and table.parts[int(part[j])].jumped(int(row[j]), component, ratio,
                                                                                    excess_min):
                    current.onset.insert(0, int(step_of[j]))
                    j -= 1
            out.append(current)
    return out, table


def _sum_parts(atts: list[StepAttribution]) -> list[dict[str, Any]]:
    """Components over the incident's steps: step, baseline, delta and attributed time summed (ns)."""
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for a in atts:
        for p in a.parts:
            v = acc[p.component]
            v[0] += p.step_ns
            v[1] += p.baseline_ns
            v[2] += p.delta_ns
            v[3] += p.attributed_ns
    total = sum(max(v[3], 0.0) for v in acc.values())
    rows: list[dict[str, Any]] = [
        {"component": c, "step_ns": round(v[0]), "baseline_ns": round(v[1]), "delta_ns": round(v[2]),
         "attributed_ns": round(v[3]), "share": round(v[3] / total, 4) if total else 0.0}
        for c, v in acc.items()
    ]
    rows.sort(key=lambda r: (-r["attributed_ns"], -r["delta_ns"], r["component"]))
    return rows


def _because(inc: Incident, rows: list[dict[str, Any]], excess: float) -> str:
    """The attribution in words: 'attention +12.1 ms (93%), idle-host +0.8 ms (6%)'."""
    grown = [r for r in rows if r["attributed_ns"] > 0][:3]
    text = ", ".join(f"{r['component']} +{fmt_ns(r['delta_ns'])} ({100 * r['share']:.0f}%)" for r in grown)
    return f"of its {fmt_ns(excess)} excess: {text}" if text else "no part of the step grew"


def _cause_text(inc: Incident, ctx: TraceAnalysis) -> str:
    if inc.finding is not None:
        return f"{inc.cause} — {inc.finding.summary}"
    words = {
        "attention": "attention time grew, and no attention rule pinned why",
        "prefill": "prefill work ran in the step (a prefill or chunked-prefill launch) and stalled the decode batch",
        "host-stall": "the GPU sat idle waiting for the host, which was busy inside the step (a host stall)",
        "host-launch-bound": "the GPU waited on kernel launches (many short idle stretches between kernels)",
        "gpu-wait": "the GPU sat idle with work already launched (a synchronisation, copy or cross-stream wait)",
        "gpu-idle": "the GPU sat idle inside the step; the trace does not tell whether the host or a wait held it",
    }
    if inc.cause in words:
        return f"{inc.cause} — {words[inc.cause]}"
    if inc.cause.startswith("kernels:"):
        return f"{inc.cause} — {inc.cause.removeprefix('kernels:')} kernels took longer than in the steps around it"
    return inc.cause


def _remedy(inc: Incident, ctx: TraceAnalysis, worst: StepAttribution, host_text: str | None,
            by_index: Mapping[int, Step]) -> str:
    if inc.finding is not None:
        return inc.finding.remedy
    facts = remedies.facts(ctx)
    ops = None
    if inc.cause in HOST_CAUSES:
        part = worst.part(IDLE_HOST)
        ops = host_text or (
            f"the GPU waited {fmt_ns(part.step_ns)} for the host in step {worst.step}, usually "
            f"{fmt_ns(part.baseline_ns)}" if part is not None else None)
    phases = {by_index[i].phase for i in inc.steps if i in by_index}
    phase = "mixed" if "mixed" in phases else ("prefill" if phases == {"prefill"} else next(iter(phases), None))
    return remedies.remedy(inc.cause, facts, ops=ops, step_phase=phase)


def neighbours(ctx: TraceAnalysis, table: Table, step: int, n: int) -> list[int]:
    """Up to `n` non-spike steps of `step`'s series nearest to it (its baseline steps, for per-op comparisons)."""
    me = table.get(step)
    if me is None:
        return []
    positions, steps = table.calm_series()[me.series]  # the series' non-spike steps, in position order
    at = int(np.searchsorted(positions, me.position, side="left"))
    lo = max(0, at - n - 1)  # the n nearest on either side are in here
    near = zip(positions[lo:at + n + 1].tolist(), steps[lo:at + n + 1].tolist(), strict=True)
    same = sorted((p for p in near if p[1] != step), key=lambda p: (abs(p[0] - me.position), p[0]))
    return [s for _, s in same[:n]]


def apply(ctx: TraceAnalysis) -> list[Finding]:
    found, table = incidents(ctx)
    crit = limit(ctx, ID, "CRITICAL_RATIO", CRITICAL_RATIO)
    by_index = ctx.steps_by_index()
    records = _Records(found, table, crit)
    # Host causes: what the host did meanwhile, read once for the incidents reported one by one.
    host_incidents = sorted((k for k, inc in enumerate(found) if inc.cause in HOST_CAUSES),
                            key=lambda k: -records.sums[k])[:MAX_INCIDENTS]
    base_of = {k: neighbours(ctx, table, records.worst(k).step, HOST_BASELINE_STEPS) for k in host_incidents}
    host_ops = read_ops(ctx, {s for k in host_incidents for s in (records.worst(k).step, *base_of[k])}) \
        if host_incidents else None

    def build(k: int) -> Finding:
        inc = found[k]
        atts = [table[i] for i in inc.steps]
        worst = records.worst(k)
        host_ev = (host_evidence(ctx, worst.step, base_of[k], host_ops)
                   if k in base_of and host_ops is not None else None)
        excess = sum(a.excess_ns for a in atts)
        onset_atts = [table[i] for i in inc.onset]
        rows = _sum_parts(atts + onset_atts)
        all_steps = inc.onset + inc.steps
        methods = sorted({a.method for a in atts})
        detail = None
        if inc.finding is not None:
            detail = inc.finding.evidence.get("why_unsplit") or inc.finding.evidence.get("why_starved")
        evidence: dict[str, Any] = {
            "cause": inc.cause,
            "cause_detail": detail,
            "cause_component": inc.component,
            "spike_steps": len(inc.steps),
            "first_step": all_steps[0],
            "last_step": all_steps[-1],
            "onset_steps": list(inc.onset),
            "threshold_step": inc.steps[0],
            "worst_step": worst.step,
            "worst_dur_ns": worst.wall_ns,
            "worst_baseline_ns": round(worst.baseline_ns),
            "worst_ratio": round(worst.ratio, 2),
            "excess_ns": round(excess),
            "baseline": "+".join(methods),
            "attribution": rows[:MAX_PARTS],
        }
        if inc.component in IDLE:
            bd = by_index[worst.step].breakdown if worst.step in by_index else None
            evidence["host_gap_max_ns"] = int(bd.host_gap_max_ns) if bd is not None else None
        if host_ev is not None:
            evidence["host_ops"] = host_ev
        host_text = describe(host_ev, fmt_ns)
        name = by_index[worst.step].name if worst.step in by_index else str(worst.step)
        n = len(inc.steps)
        onset = (f"; the {inc.component} part had already jumped in step{'s' if len(inc.onset) > 1 else ''} "
                 f"{step_ranges(inc.onset)} before the step total crossed the threshold" if inc.onset else "")
        return Finding(
            id=ID,
            severity=Severity.CRITICAL if worst.ratio >= crit else Severity.WARNING,
            steps=tuple(all_steps),
            summary=(f"latency spike in {n} step{'s' if n > 1 else ''} ({step_ranges(all_steps)}): up to "
                     f"{fmt_ns(worst.wall_ns)} vs a {fmt_ns(worst.baseline_ns)} baseline ({worst.ratio:.0f}x); "
                     f"cause: {inc.cause}"),
            evidence=evidence,
            explanation=(
                f"Read as a time series, step {worst.step} ('{name}') took {fmt_ns(worst.wall_ns)} where the trend "
                f"of the steps around it predicts {fmt_ns(worst.baseline_ns)} "
                + ("(a line in the step's KV tokens through the lower quartile of the steps)"
                   if methods[0] in ("linear-in-tokens", "constant")
                   else "(the lower quartile of the steps around it)")
                + f"; {n} step{'s' if n > 1 else ''} in a row broke from it the same way{onset}. Compared part by "
                f"part with those steps, {_because(inc, rows, excess)}. Cause: {_cause_text(inc, ctx)}"
                + (f" (meanwhile on the host: {host_text})" if host_text else "")
                + "."),
            remedy=_remedy(inc, ctx, worst, host_text, by_index),
            saving_ns=round(excess),
            step_saving_ns={i: round(table[i].excess_ns) for i in inc.steps},
        )

    out = _fold(records, int(limit(ctx, ID, "MAX_INCIDENTS", MAX_INCIDENTS)), build)
    return out + _groups(records, out)


class _Records:
    """What ranking and folding need of the incidents, as arrays over them (k: an incident's place in `found`),
    before any finding is written (only the incidents reported one by one, and the first of each folded cause,
    are: a long trace has 10^4-10^5 incidents): each one's spike steps' excess over their baselines, summed and
    rounded, its worst step (the most excess; the first of equals) and that step's ratio, its steps (onset then
    spikes), its severity. Folded and grouped findings gather theirs from these arrays, not from a dict or a
    record per incident."""

    def __init__(self, found: list[Incident], table: Table, crit: float) -> None:
        self.found, self.table = found, table
        m = len(found)
        lens = np.fromiter(map(len, (inc.steps for inc in found)), np.int64, m)
        self.offsets = np.cumsum(lens) - lens
        self.lens = lens
        self.spikes = np.fromiter(itertools.chain.from_iterable(inc.steps for inc in found), np.int64,
                                  int(lens.sum()))
        wall, base = table.gather(self.spikes)
        excess = wall.astype(float) - base
        # An incident of one step is its step; longer ones are summed in Python, as floats add up left to right,
        # and their worst step is the first with their most excess.
        sums = excess[self.offsets] if m else np.zeros(0)
        worst_at = self.offsets.copy()
        longer = np.flatnonzero(lens > 1)
        if len(longer):
            ex: list[float] = excess.tolist()
            starts, ends = self.offsets[longer].tolist(), (self.offsets + lens)[longer].tolist()
            sums[longer] = [sum(ex[a:b]) for a, b in zip(starts, ends, strict=True)]
            worst_at[longer] = [max(range(a, b), key=ex.__getitem__) for a, b in zip(starts, ends, strict=True)]
        self.sums: list[float] = sums.tolist()
        self.excess = np.fromiter(map(round, self.sums), np.int64, m)
        self.worst_step = self.spikes[worst_at]
        w, b0 = wall[worst_at].astype(float), base[worst_at]
        self.worst_ratio = np.divide(w, b0, out=np.zeros(m), where=b0 != 0)
        self.critical = self.worst_ratio >= crit
        # Every spike step's excess as a step saving (ns, at least 0; halves to even, as `round`).
        self.step_excess = np.maximum(np.rint(excess), 0).astype(np.int64)
        steps_lens = np.fromiter(map(len, (inc.onset for inc in found)), np.int64, m) + lens
        self.step_offsets = np.cumsum(steps_lens) - steps_lens
        self.step_lens = steps_lens
        self.steps = np.fromiter(itertools.chain.from_iterable(itertools.chain(inc.onset, inc.steps) for inc in found),
                                 np.int64, int(steps_lens.sum()))
        self._worst: dict[int, StepAttribution] = {}

    def __len__(self) -> int:
        return len(self.found)

    def worst(self, k: int) -> StepAttribution:
        """Incident k's worst step's attribution (made when first asked)."""
        got = self._worst.get(k)
        if got is None:
            got = self._worst[k] = self.table[int(self.worst_step[k])]
        return got

    def severity(self, k: int) -> Severity:
        return Severity.CRITICAL if self.critical[k] else Severity.WARNING

    def most(self, members: list[int], *, least_step: bool = False) -> int:
        """The member whose worst ratio, rounded to 2 places (by `round`, which numpy's rounding is not), is the
        largest: the first of equals, or (`least_step`) of equals the one with the least worst step (then the
        first). Only members near the largest ratio are rounded: two ratios that round the same lie within 0.01
        of each other (rounding never reorders)."""
        ratio = self.worst_ratio[members]
        near = np.flatnonzero(ratio >= ratio.max() - 0.02)
        if not len(near):
            near = np.arange(len(members))
        # Each distinct ratio rounded once (a folded cause's thousands of incidents often share one worst ratio).
        distinct, inverse = np.unique(ratio[near], return_inverse=True)
        rounded = [round(x, 2) for x in distinct.tolist()]
        top = max(rounded)
        at_top = np.flatnonzero(np.asarray([r == top for r in rounded], bool)[inverse])
        if least_step:  # of those, the least worst step (argmin: the first of equals)
            best = int(at_top[np.argmin(self.worst_step[members][near[at_top]])])
        else:
            best = int(at_top[0])
        return members[int(near[best])]

    @staticmethod
    def _ranges(offsets: np.ndarray, lens: np.ndarray, members: list[int]) -> np.ndarray:
        """The positions of the members' ranges (offsets[k], lens[k]) one after the other, in members' order."""
        at = np.asarray(members, np.int64)
        n = lens[at]
        first = np.cumsum(n) - n
        return np.repeat(offsets[at] - first, n) + np.arange(int(n.sum()), dtype=np.int64)

    def all_steps(self, members: list[int]) -> list[int]:
        """The members' steps (onsets and spikes), sorted."""
        out: list[int] = np.sort(self.steps[self._ranges(self.step_offsets, self.step_lens, members)]).tolist()
        return out

    def step_savings(self, members: list[int]) -> dict[int, int]:
        """{spike step: its excess} over the members, in their order."""
        pos = self._ranges(self.offsets, self.lens, members)
        return dict(zip(self.spikes[pos].tolist(), self.step_excess[pos].tolist(), strict=True))

    def first_last(self, k: int) -> tuple[int, int]:
        """Incident k's first and last step (onset included)."""
        a = int(self.step_offsets[k])
        return int(self.steps[a]), int(self.steps[a + int(self.step_lens[k]) - 1])


def _fold(records: _Records, keep: int, build: Callable[[int], Finding]) -> list[Finding]:
    """The `keep` incidents with the most excess time as they are (in step order), and the others as one
    finding per cause that counts them (its steps: all of theirs; its severity: the worst of theirs)."""
    if len(records) <= keep:
        return [build(k) for k in range(len(records))]
    ranked = np.argsort(-records.excess, kind="stable").tolist()
    kept = sorted(ranked[:keep])
    folded: dict[str, list[int]] = defaultdict(list)
    for i in sorted(ranked[keep:]):
        folded[records.found[i].cause].append(i)
    out = [build(i) for i in kept]
    for cid, members in folded.items():
        steps = records.all_steps(members)
        excess = int(records.excess[members].sum())
        worst = records.worst(records.most(members))
        severity = Severity.CRITICAL if records.critical[members].any() else Severity.WARNING
        first = build(members[0])
        out.append(Finding(
            id=ID,
            severity=severity,
            steps=tuple(steps),
            summary=(f"recurring latency spikes: {len(members)} incidents besides the {keep} worst listed apart, "
                     f"in {len(steps)} steps ({step_ranges(steps)}): {fmt_ns(excess)} of excess time in all; "
                     f"cause: {cid}"),
            evidence={
                "cause": cid,
                "cause_component": first.evidence.get("cause_component"),
                "incidents": len(members),
                "spike_steps": len(steps),
                "first_step": steps[0],
                "last_step": steps[-1],
                "worst_step": worst.step,
                "worst_ratio": round(worst.ratio, 2),
                "excess_ns": excess,
                "folded": True,
            },
            explanation=(
                f"Besides the {keep} incidents with the most excess time, reported one by one, {len(members)} "
                f"more incidents broke from the trend of their series the same way (worst: step "
                f"{worst.step}, {round(worst.ratio, 2):.0f}x its baseline), "
                f"each attributed to {cid}. The first: {first.explanation}"),
            remedy=first.remedy,
            saving_ns=excess,
            step_saving_ns=records.step_savings(members),
        ))
    return out


def _groups(records: _Records, listed: list[Finding]) -> list[Finding]:
    """One finding per cause that no other rule's finding explains (host-stall, prefill, kernels:gemm, ...) and
    that recurs (GROUP_MIN_INCIDENTS incidents or more): the root cause its incidents are the evidence of
    (`traceinsight.diagnose.rootcause` links them to it by `evidence.cause`). Its saving is the incidents' excess
    time, step by step; its severity the worst of theirs."""
    by_cause: dict[str, list[int]] = defaultdict(list)
    for k, inc in enumerate(records.found):
        if inc.finding is None:
            by_cause[inc.cause].append(k)
    out = []
    for cid, members in by_cause.items():
        if len(members) < GROUP_MIN_INCIDENTS:
            continue
        steps = records.all_steps(members)
        excess = int(records.excess[members].sum())
        worst = records.worst(records.most(members, least_step=True))
        severity = Severity.CRITICAL if records.critical[members].any() else Severity.WARNING
        excess_of = records.excess[members].tolist()
        biggest = [members[j] for j in sorted(range(len(members)), key=lambda j: -excess_of[j])[:MAX_INCIDENTS]]
        out.append(Finding(
            id=ID,
            severity=severity,
            steps=tuple(steps),
            summary=(f"{cid} in {len(members)} latency-spike incidents ({step_ranges(steps)}): up to "
                     f"{fmt_ns(worst.wall_ns)} vs a {fmt_ns(worst.baseline_ns)} baseline ({worst.ratio:.1f}x), "
                     f"{fmt_ns(excess)} of excess time in all"),
            evidence={
                "cause": cid,
                "cause_component": records.found[members[0]].component,
                "group": True,
                "incidents": len(members),
                "spike_steps": int(records.lens[members].sum()),
                "first_step": steps[0],
                "last_step": steps[-1],
                "worst_step": worst.step,
                "worst_ratio": round(worst.ratio, 2),
                "excess_ns": excess,
                "incident_steps": [[*records.first_last(k), int(records.excess[k])] for k in biggest],
            },
            explanation=(
                f"{len(members)} incidents broke from the trend of their series for one cause, {cid}: one root "
                f"cause, not {len(members)}. Worst: step {worst.step}, {round(worst.ratio, 2):.1f}x its baseline; "
                f"{fmt_ns(excess)} of excess time over {len(steps)} steps. Each incident is listed as evidence "
                "of this finding."),
            remedy=next((f.remedy for f in listed if f.evidence.get("cause") == cid), ""),
            saving_ns=excess,
            step_saving_ns=records.step_savings(members),
        ))
    return out
