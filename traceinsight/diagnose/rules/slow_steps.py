"""slow-steps: runs of steps slower than the baseline of their kind, below the latency-spike ratio.

A latency spike is a step at least twice its baseline. A user reading p99 step time cares about 1.3x as well: four
steps whose GEMMs took 4 ms more (1.6x the step) are a finding. A step is slow when it is not a spike and
- its time rose at least SLOW_RATIO times its baseline (the trend of its series, `traceinsight.diagnose.
  attribution`, the same one latency-spike reads) and beyond the noise band (NOISE_SIGMAS_MIN robust standard
  deviations of the steps' times around their baselines) and EXCESS_MIN_NS; or
- one component of it (attention, gemm, communication, idle-host, ...) rose SLOW_RATIO times its own baseline,
  beyond that component's noise band, EXCESS_MIN_NS, and COMPONENT_MIN_SHARE of the step's baseline time, even
  if the step as a whole did not.
Consecutive slow steps of a series with the same cause form one incident; the cause is named as latency-spike
names it (the attention finding covering the step, `kernels:gemm`, `host-stall`, `prefill`, ...), and its cost
is the excess time (or the component's growth, where the component alone rose). Severity by cost against all
the steps' time: critical from CRITICAL_COST_FRACTION, warning from WARNING_COST_FRACTION, else info. The thresholds
are data, in one place with latency-spike's ratio (`traceinsight/diagnose/slow_steps.toml`).

Incidents of one cause that no attention finding explains are grouped into one finding per cause (their root
cause, `evidence.group`), the MAX_INCIDENTS costliest listed one by one as its evidence.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from traceinsight.diagnose.attribution import ATTRIBUTION, SeriesPart, StepAttribution, Table
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.rule import Input, limit
from traceinsight.diagnose.rules import latency_spike
from traceinsight.diagnose.views import step_ranges
from traceinsight.units import fmt_ns

ID = "slow-steps"
NAME = "Slow steps (below the spike ratio)"
DESCRIPTION = ("Runs of steps, or of one part of them, slower than the baseline of their kind by 1.3x or more and "
               "beyond its noise band, though not latency spikes.")
PASSED = "no step rose 1.3x above its baseline beyond the noise band (short of a latency spike)"
NEEDS = (Input.STEPS,)
OPTIONAL = (Input.SIDECAR,)
# latency-spike's findings too: steps already in a spike incident (its onset included) are not told again.
READS = (*latency_spike.READS, latency_spike.ID)
USES = (ATTRIBUTION,)


THRESHOLDS = latency_spike.THRESHOLDS
SLOW_RATIO = THRESHOLDS["slow_ratio"]
NOISE_SIGMAS_MIN = THRESHOLDS["noise_sigmas"]
EXCESS_MIN_NS = THRESHOLDS["excess_min_ns"]
COMPONENT_MIN_SHARE = THRESHOLDS["component_min_share"]
CRITICAL_COST_FRACTION = THRESHOLDS["critical_cost_share"]
WARNING_COST_FRACTION = THRESHOLDS["warning_cost_share"]
# Incidents reported one by one (the costliest); every incident counts in its cause's group.
MAX_INCIDENTS = 20
# Robust standard deviation from the median absolute deviation (normal data).
MAD_SIGMA_RATIO = 1.4826


def noise_band(residuals: np.ndarray, sigmas: float = NOISE_SIGMAS_MIN) -> float:
    """`sigmas` (NOISE_SIGMAS_MIN) robust standard deviations of `residuals` (1.4826 x their median absolute
    deviation): how far a step's time strays from its baseline when nothing goes wrong. 0 for no residuals."""
    if residuals.size == 0:
        return 0.0
    med = _median(residuals)
    return float(sigmas * MAD_SIGMA_RATIO * _median(np.abs(residuals - med)))


def _median(values: np.ndarray) -> float:
    """The median of a non-empty array, from its sorted values: np.median and np.quantile import numpy.ma, which a
    short analysis does not otherwise load (tests/test_startup.py)."""
    xs = np.sort(values)
    mid = xs.size // 2
    return float(xs[mid]) if xs.size % 2 else float((xs[mid - 1] + xs[mid]) / 2)


@dataclass
class _Slow:
    part: SeriesPart
    row: int
    step: int
    component: str | None
    cost_ns: float  # excess over the baseline, or the component's growth
    ratio: float  # the step's (or the component's) time over its baseline
    whole: bool  # the step as a whole rose (else one component did)

    @property
    def att(self) -> StepAttribution:
        """The step's attribution (made when asked: only the findings' worst steps are; a trace has 10^4 slow
        steps)."""
        return self.part.at(self.row)


@dataclass
class _Found:
    """The slow steps of one series part, as its rows (ascending) and what rose in each."""

    part: SeriesPart
    rows: list[int]
    components: list[str | None]
    cost_ns: list[float]
    ratio: list[float]
    whole: list[bool]


def slow_steps(ctx: TraceAnalysis, table: Table) -> list[_Found]:
    """The slow steps (not spikes) of every series part, over the table's arrays."""
    ratio = limit(ctx, ID, "SLOW_RATIO", SLOW_RATIO)
    excess_min = limit(ctx, ID, "EXCESS_MIN_NS", EXCESS_MIN_NS)
    share = limit(ctx, ID, "COMPONENT_MIN_SHARE", COMPONENT_MIN_SHARE)
    sigmas = limit(ctx, ID, "NOISE_SIGMAS_MIN", NOISE_SIGMAS_MIN)
    out: list[_Found] = []
    for p in table.parts:  # one series (part) at a time, its steps as arrays: a long trace has 10^5
        d = p.data
        n = len(p.steps)
        wall = p.wall.astype(float)
        base, spike = p.baseline, p.spike
        band = noise_band((wall - base)[~spike], sigmas)
        whole = ~spike & (base > 0) & (wall >= ratio * base) & (wall - base >= max(excess_min, band))
        values, bases = d.values, d.bases
        deltas = values - bases
        bands = np.array([noise_band(deltas[~spike, j], sigmas) for j in range(len(d.names))], float)
        need = np.maximum(np.maximum(bands[None, :], excess_min), share * base[:, None])
        ok = (bases > 0) & (values >= ratio * bases) & (deltas >= need)
        part = ~spike & ~whole & ok.any(axis=1) if len(d.names) else np.zeros(n, bool)
        best = np.argmax(np.where(ok, deltas, -np.inf), axis=1) if len(d.names) else np.zeros(n, np.int64)
        rows = np.flatnonzero(whole | part)
        if not len(rows):
            continue
        w = whole[rows]
        j = best[rows]
        comps = iter(p.components(rows[w]) if w.any() else [])  # the whole-step rows', in row order
        out.append(_Found(
            p, rows.tolist(),
            [next(comps) if wr else d.names[jr] for wr, jr in zip(w.tolist(), j.tolist(), strict=True)],
            np.where(w, wall[rows] - base[rows], deltas[rows, j]).tolist(),
            np.where(w, wall[rows] / np.where(w, base[rows], 1.0),
                     values[rows, j] / np.where(w, 1.0, bases[rows, j])).tolist(),
            w.tolist()))
    return out


@dataclass
class _Incident:
    cause: str
    component: str | None
    finding: Finding | None
    members: list[_Slow]
    cost_ns: float = 0.0  # the members' cost, summed once they are all in (`incidents`)

    @property
    def steps(self) -> list[int]:
        return [m.step for m in self.members]

    @property
    def worst(self) -> _Slow:
        return max(self.members, key=lambda m: m.ratio)


def incidents(ctx: TraceAnalysis) -> list[_Incident]:
    """Runs of slow steps of one series with one cause, in series order."""
    table = latency_spike.attributions(ctx)
    told = {s for f in ctx.findings if f.id == latency_spike.ID for s in f.steps}
    causes = latency_spike.Causes(ctx.findings, table)
    # (series, position, step) -> (part, row, component, cost, ratio, whole, cause, finding) of each slow step
    slow: list[tuple[int, int, int, SeriesPart, int, str | None, float, float, bool, str, Finding | None]] = []
    for f in slow_steps(ctx, table):
        p = f.part
        rows = np.asarray(f.rows, np.int64)
        cause, finding = causes.of(p, rows, f.components)
        for r, c, cost, ratio, whole, cid, fnd, step, pos in zip(
                f.rows, f.components, f.cost_ns, f.ratio, f.whole, cause, finding, p.steps[rows].tolist(),
                p.positions[rows].tolist(), strict=True):
            if step not in told:
                slow.append((p.series, pos, step, p, r, c, cost, ratio, whole, cid, fnd))
    slow.sort(key=lambda t: (t[0], t[1]))
    out: list[_Incident] = []
    current: _Incident | None = None
    last = (-1, -2)
    for series, pos, step, p, r, c, cost, ratio, whole, cid, fnd in slow:
        m = _Slow(p, r, step, c, cost, ratio, whole)
        if current is not None and last == (series, pos - 1) and current.cause == cid:
            current.members.append(m)
        else:
            current = _Incident(cid, c, fnd, [m])
            out.append(current)
        last = (series, pos)
    for inc in out:
        inc.cost_ns = sum(m.cost_ns for m in inc.members)
    return out


def _rose(m: _Slow) -> str:
    """What rose, in words: 'the step 1.6x (gemm grew most)' or 'idle-host 7.2x'."""
    if m.whole:
        return f"the step {m.ratio:.1f}x" + (f" ({m.component} grew most)" if m.component else "")
    return f"{m.component} {m.ratio:.1f}x"


def _severity(cost_ns: float, total_ns: float, critical: float, warning: float) -> Severity:
    """Severity by cost: the incident's time against all the steps' time (CRITICAL_/WARNING_COST_FRACTION)."""
    if total_ns > 0 and cost_ns >= critical * total_ns:
        return Severity.CRITICAL
    if total_ns > 0 and cost_ns >= warning * total_ns:
        return Severity.WARNING
    return Severity.INFO


def _evidence(inc: _Incident) -> dict[str, Any]:
    w = inc.worst
    return {
        "cause": inc.cause,
        "cause_component": inc.component,
        "slow_steps": len(inc.members),
        "first_step": inc.steps[0],
        "last_step": inc.steps[-1],
        "worst_step": w.att.step,
        "worst_ratio": round(w.ratio, 2),
        "worst_dur_ns": w.att.wall_ns,
        "worst_baseline_ns": round(w.att.baseline_ns),
        "rose": "step" if w.whole else "component",
        "cost_ns": round(inc.cost_ns),
        "baseline": w.att.method,
    }


def apply(ctx: TraceAnalysis) -> list[Finding]:
    found = incidents(ctx)
    if not found:
        return []
    total = float(ctx.step_arrays().wall.sum())
    fractions = (limit(ctx, ID, "CRITICAL_COST_FRACTION", CRITICAL_COST_FRACTION),
                 limit(ctx, ID, "WARNING_COST_FRACTION", WARNING_COST_FRACTION))
    by_index = ctx.steps_by_index()

    def remedy(inc: _Incident) -> str:
        if inc.finding is not None:
            return inc.finding.remedy
        worst = inc.worst.att
        li = latency_spike.Incident(inc.cause, inc.component, None, inc.steps)
        return latency_spike._remedy(li, ctx, worst, None, by_index)

    def one(inc: _Incident) -> Finding:
        w = inc.worst
        what = "the step" if w.whole else f"its {inc.component} time"
        n = len(inc.members)
        return Finding(
            id=ID,
            severity=_severity(inc.cost_ns, total, *fractions),
            steps=tuple(inc.steps),
            summary=(f"{n} slow step{'s' if n > 1 else ''} ({step_ranges(inc.steps)}): {_rose(w)}, "
                     f"{fmt_ns(inc.cost_ns)} in all; cause: {inc.cause}"),
            evidence=_evidence(inc),
            explanation=(
                f"Step {w.att.step} took {fmt_ns(w.att.wall_ns)} where the trend of the steps of its kind predicts "
                f"{fmt_ns(w.att.baseline_ns)}; {what} rose {w.ratio:.1f}x, beyond the noise band of the steps "
                f"around it, though short of a latency spike ({latency_spike.SPIKE_RATIO:.0f}x). {n} step"
                f"{'s' if n > 1 else ''} in a row rose the same way, {fmt_ns(inc.cost_ns)} of extra time; cause: "
                f"{inc.cause}" + (f" — {inc.finding.summary}" if inc.finding is not None else "") + "."),
            remedy=remedy(inc),
            saving_ns=round(inc.cost_ns),
            step_saving_ns={m.step: round(m.cost_ns) for m in inc.members},
        )

    keep = int(limit(ctx, ID, "MAX_INCIDENTS", MAX_INCIDENTS))
    ranked = sorted(range(len(found)), key=lambda i: -found[i].cost_ns)[:keep]
    out = [one(found[i]) for i in sorted(ranked)]
    groups: dict[str, list[_Incident]] = defaultdict(list)
    for inc in found:
        if inc.finding is None:
            groups[inc.cause].append(inc)
    listed = {id(found[i]) for i in ranked}
    for cid, members in groups.items():
        if len(members) < latency_spike.GROUP_MIN_INCIDENTS and all(id(m) in listed for m in members):
            continue
        steps = sorted(s for m in members for s in m.steps)
        cost = sum(m.cost_ns for m in members)
        worst = max((m.worst for m in members), key=lambda w: w.ratio)
        out.append(Finding(
            id=ID,
            severity=_severity(cost, total, *fractions),
            steps=tuple(steps),
            summary=(f"{cid} in {len(members)} incidents of slow steps ({step_ranges(steps)}): "
                     f"{fmt_ns(cost)} in all; worst step {worst.att.step}, {_rose(worst)}"),
            evidence={"cause": cid, "cause_component": members[0].component, "group": True,
                      "incidents": len(members), "slow_steps": len(steps), "first_step": steps[0],
                      "last_step": steps[-1], "worst_step": worst.att.step, "worst_ratio": round(worst.ratio, 2),
                      "cost_ns": round(cost)},
            explanation=(f"{len(members)} runs of slow steps for one cause, {cid}: one root cause. Worst: step "
                         f"{worst.att.step}, {worst.ratio:.1f}x its baseline; {fmt_ns(cost)} of extra time over "
                         f"{len(steps)} steps."),
            remedy=remedy(members[0]),
            saving_ns=round(cost),
            step_saving_ns={m.step: round(m.cost_ns) for inc in members for m in inc.members},
        ))
    return out
