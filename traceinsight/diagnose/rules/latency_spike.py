"""latency-spike: the postmortem. Steps whose time breaks from the trend, each linked to its cause.

The series is the trace's steps in time order, one series per attention kernel mix (steps running different
kernels are not compared). The trend is linear in the step's total KV tokens when the batch composition gives
them (a decode step should cost a + b x tokens), else a rolling lower quartile over step order
(`traceinsight.diagnose.baseline`: the level steps keep when nothing goes wrong), fitted on the steps no other
rule already found slow (KNOWN_SLOW). A spike is a step at least SPIKE_RATIO times its baseline and
EXCESS_MIN_NS above it. Consecutive spikes with the same cause form one
incident (one finding); the cause is the most specific finding of the other rules that names the step
(CAUSE_PRIORITY), or none. A long trace can hold thousands of incidents (one cause recurring every few steps):
the MAX_INCIDENTS with the most excess time are findings of their own, the others are folded into one finding
per cause that counts them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from traceinsight.diagnose.baseline import fit_spikes
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.rule import Input, limit
from traceinsight.diagnose.views import fmt_ms, step_ranges
from traceinsight.model.steps import Step

ID = "latency-spike"
NAME = "Latency spikes (postmortem)"
DESCRIPTION = "Steps whose time breaks from the trend of the step series, linked to the finding that explains them."
PASSED = "no step broke from the trend of its series"
NEEDS = (Input.STEPS,)
OPTIONAL = (Input.SIDECAR,)

# A spike takes at least this many times its baseline...
SPIKE_RATIO = 2.0
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
# Which finding explains a spike, most specific first.
CAUSE_PRIORITY = ("split-kv-off", "split-kv-starved", "tail-ctas", "sm-idle", "wave-quantization", "slow-path",
                  "decode-on-prefill-kernel", "kv-bandwidth")


def signature(step: Step) -> tuple[str, ...]:
    """The kernel mix of a step (sorted distinct attention kernel names): steps are compared within one mix."""
    return tuple(sorted({launch.attention.name for launch in step.launches}))


def _tokens(ctx: TraceAnalysis, step: Step) -> int | None:
    s = ctx.schedule
    b = s.batches.get(step.index) if s else None
    return b.total_kv_tokens if b is not None and b.source == "sidecar" else None


def spike_table(ctx: TraceAnalysis) -> dict[int, dict[str, Any]]:
    """Per step index: dur_ns, baseline_ns, ratio, spike (bool), method, group (signature index)."""
    ratio = limit(ctx, ID, "SPIKE_RATIO", SPIKE_RATIO)
    excess = limit(ctx, ID, "EXCESS_MIN_NS", EXCESS_MIN_NS)
    half = int(limit(ctx, ID, "HALF_WINDOW_STEPS", HALF_WINDOW_STEPS))
    known_slow = {s for f in ctx.findings if f.id in KNOWN_SLOW for s in f.steps}
    groups: dict[tuple[str, ...], list[Step]] = defaultdict(list)
    for st in sorted(ctx.steps, key=lambda s: (s.start_ns, s.index)):
        if st.launches:
            groups[signature(st)].append(st)
    out: dict[int, dict[str, Any]] = {}
    for gi, series in enumerate(groups.values()):
        with_tokens = [s for s in series if _tokens(ctx, s) is not None]
        without = [s for s in series if _tokens(ctx, s) is None]
        parts: list[tuple[list[Step], list[int | None] | None]] = []
        if with_tokens:
            parts.append((with_tokens, [_tokens(ctx, s) for s in with_tokens]))
        if without:
            parts.append((without, None))
        for steps, tokens in parts:
            fit = fit_spikes([s.dur_ns for s in steps], tokens, ratio=ratio, min_excess_ns=excess, half_window=half,
                             exclude=[s.index in known_slow for s in steps], min_fit_points=MIN_FIT_STEPS)
            for s, base, flag in zip(steps, fit.baseline_ns, fit.spikes, strict=True):
                out[s.index] = {"dur_ns": s.dur_ns, "baseline_ns": base, "ratio": s.dur_ns / base if base else 0.0,
                                "spike": flag, "method": fit.method, "group": gi}
    return out


def _cause(step: int, by_step: dict[int, list[Finding]]) -> Finding | None:
    found = by_step.get(step, [])
    for cid in CAUSE_PRIORITY:
        for f in found:
            if f.id == cid:
                return f
    return None


def apply(ctx: TraceAnalysis) -> list[Finding]:
    table = spike_table(ctx)
    by_step: dict[int, list[Finding]] = defaultdict(list)
    for f in ctx.findings:
        for s in f.steps:
            by_step[s].append(f)
    # Incidents: runs of consecutive spikes (in their series' order) with the same cause.
    incidents: list[tuple[Finding | None, list[int]]] = []
    order = sorted(table, key=lambda i: (table[i]["group"], i))
    current: list[int] = []
    cause: Finding | None = None
    last_group = None
    for i in order:
        row = table[i]
        c = _cause(i, by_step) if row["spike"] else None
        if not row["spike"] or row["group"] != last_group or (current and c is not cause):
            if current:
                incidents.append((cause, current))
            current = []
        if row["spike"]:
            current.append(i)
            cause = c
        last_group = row["group"]
    if current:
        incidents.append((cause, current))

    crit = limit(ctx, ID, "CRITICAL_RATIO", CRITICAL_RATIO)
    names = {st.index: st.name for st in ctx.steps}
    out = []
    for cause, steps in incidents:
        w = max(steps, key=lambda i: table[i]["dur_ns"] - table[i]["baseline_ns"])
        row = table[w]
        excess = sum(table[i]["dur_ns"] - table[i]["baseline_ns"] for i in steps)
        methods = sorted({table[i]["method"] for i in steps})
        cid = cause.id if cause else None
        evidence = {
            "cause": cid,
            "spike_steps": len(steps),
            "first_step": steps[0],
            "last_step": steps[-1],
            "worst_step": w,
            "worst_dur_ns": row["dur_ns"],
            "worst_baseline_ns": round(row["baseline_ns"]),
            "worst_ratio": round(row["ratio"], 2),
            "excess_ns": round(excess),
            "baseline": "+".join(methods),
        }
        name = names.get(w, str(w))
        because = (f"cause: {cid} — {cause.summary}" if cause else
                   "no other rule explains it (look at the host side, other streams, or clock changes)")
        out.append(Finding(
            id=ID,
            severity=Severity.CRITICAL if row["ratio"] >= crit else Severity.WARNING,
            steps=tuple(steps),
            summary=(f"latency spike in {len(steps)} step{'s' if len(steps) > 1 else ''} ({step_ranges(steps)}): up "
                     f"to {fmt_ms(row['dur_ns'])} vs a {fmt_ms(row['baseline_ns'])} baseline "
                     f"({row['ratio']:.0f}x); cause: {cid or 'unexplained'}"),
            evidence=evidence,
            explanation=(
                f"Read as a time series, step {w} ('{name}') took {fmt_ms(row['dur_ns'])} where the trend of the "
                f"steps around it predicts {fmt_ms(row['baseline_ns'])} "
                + ("(a line in the step's KV tokens through the lower quartile of the steps)"
                   if methods[0] in ("linear-in-tokens", "constant")
                   else "(the lower quartile of the steps around it)")
                + f"; {len(steps)} step{'s' if len(steps) > 1 else ''} in a row broke from it the same way. "
                + because + "."),
            remedy=cause.remedy if cause else "Correlate the spike with host activity and other GPU work.",
            saving_ns=round(excess),
        ))
    return _fold(out, [c for c, _ in incidents], int(limit(ctx, ID, "MAX_INCIDENTS", MAX_INCIDENTS)))


def _fold(found: list[Finding], causes: list[Finding | None], keep: int) -> list[Finding]:
    """The `keep` incidents with the most excess time as they are (in step order), and the others as one
    finding per cause that counts them (its steps: all of theirs; its severity: the worst of theirs)."""
    if len(found) <= keep:
        return found
    ranked = sorted(range(len(found)), key=lambda i: -(found[i].saving_ns or 0))
    kept = sorted(ranked[:keep])
    folded: dict[str | None, list[int]] = defaultdict(list)
    for i in sorted(ranked[keep:]):
        folded[found[i].evidence["cause"]].append(i)
    out = [found[i] for i in kept]
    for cid, members in folded.items():
        steps = sorted(s for i in members for s in found[i].steps)
        excess = sum(found[i].saving_ns or 0 for i in members)
        worst = max(members, key=lambda i: found[i].evidence["worst_ratio"])
        cause = causes[members[0]]
        severity = min((found[i].severity for i in members), key=lambda x: x.rank)
        out.append(Finding(
            id=ID,
            severity=severity,
            steps=tuple(steps),
            summary=(f"recurring latency spikes: {len(members)} incidents besides the {keep} worst listed apart, "
                     f"in {len(steps)} steps ({step_ranges(steps)}): {fmt_ms(excess)} of excess time in all; "
                     f"cause: {cid or 'unexplained'}"),
            evidence={
                "cause": cid,
                "incidents": len(members),
                "spike_steps": len(steps),
                "first_step": steps[0],
                "last_step": steps[-1],
                "worst_step": found[worst].evidence["worst_step"],
                "worst_ratio": found[worst].evidence["worst_ratio"],
                "excess_ns": excess,
                "folded": True,
            },
            explanation=(
                f"Besides the {keep} incidents with the most excess time, reported one by one, {len(members)} "
                f"more incidents broke from the trend of their series the same way (worst: step "
                f"{found[worst].evidence['worst_step']}, {found[worst].evidence['worst_ratio']:.0f}x its baseline). "
                + (f"cause: {cid} — {cause.summary}." if cause else "No other rule explains them.")),
            remedy=found[members[0]].remedy,
            saving_ns=excess,
        ))
    return out
