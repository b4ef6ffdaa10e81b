"""split-kv-starved: split-KV was on, but the CTA budget left too few spare work items to cut the long request.

Just below the threshold (B slightly under B_th) the planner still splits, but it may create at most
max_grid / H_kv work items in all, one per request at least: at B = 296 of B_th = 297 a single spare item
exists, so a 210K-token request is cut in two at most and the step takes 6.8 ms instead of 0.4 ms even though
split_kv == 1. Detected from the trace alone: a merge kernel follows (split on), the grid fills the budget, and
the launch is far slower than the kernel's balanced launches.

FlashAttention-3 is starved when its longest request was cut, but into too few splits: the call forced a small
num_splits, or the request reached the static bound S (`traceinsight.diagnose.fa3`).
"""

from __future__ import annotations

from traceinsight.diagnose import fa3, remedies
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.rule import Input, limit
from traceinsight.diagnose.savings import by_step
from traceinsight.diagnose.slowdown import Slowdown, slow_launches, worst
from traceinsight.diagnose.views import LAUNCHES, step_ranges, steps_of
from traceinsight.model.occupancy import CUDA_CORE, FA2, FA3
from traceinsight.units import fmt_ns

ID = "split-kv-starved"
NAME = "Split-KV starved"
DESCRIPTION = "Split-KV on, but too few spare CTAs to cut the longest request into enough chunks."
PASSED = "every split launch ran close to the kernel's balanced time"
NEEDS = (Input.STEPS, Input.THRESHOLDS)
OPTIONAL = (Input.SIDECAR, Input.SCHEDULE)
USES = (LAUNCHES,)

BACKENDS = (CUDA_CORE, FA2, FA3)
# A split launch is starved when it takes at least this many times its balanced reference...
SLOWDOWN_MIN_RATIO = 2.0
# ...and at least this much longer (ns).
EXCESS_MIN_NS = 100_000


def apply(ctx: TraceAnalysis) -> list[Finding]:
    ratio_min = limit(ctx, ID, "SLOWDOWN_MIN_RATIO", SLOWDOWN_MIN_RATIO)
    excess_min = limit(ctx, ID, "EXCESS_MIN_NS", EXCESS_MIN_NS)
    out: list[Finding] = []
    for hits in slow_launches(ctx, BACKENDS, True, ratio_min, excess_min):
        if hits[0].view.backend == FA3:
            by_reason: dict[str, list[Slowdown]] = {}
            for h in hits:
                by_reason.setdefault(fa3.why_starved(h.view), []).append(h)
            out.extend(_fa3_finding(ctx, reason, group) for reason, group in by_reason.items())
            continue
        w = worst(hits)
        wv = w.view
        thr = wv.threshold
        k = wv.launch.attention
        ctas = k.grid[0] * max(k.grid[1], 1) * max(k.grid[2], 1)
        b = wv.batch_size
        per_head = thr.max_grid // thr.kv_heads if thr and thr.kv_heads else None
        spare = per_head - b if per_head is not None and b is not None else None
        plan = wv.model.plan if wv.model else None
        longest_chunks = None
        if plan is not None and wv.batch and wv.batch.kv_lens:
            i = max(range(len(wv.batch.kv_lens)), key=lambda j: wv.batch.kv_lens[j])  # type: ignore[index,union-attr]
            longest_chunks = plan.splits[i]
        steps = steps_of(h.view for h in hits)
        evidence = {
            "kernel": wv.kernel,
            "backend": wv.backend,
            "launches": len(hits),
            "b_threshold": thr.b_threshold if thr else None,
            "max_grid": thr.max_grid if thr else None,
            "worst_step": wv.step.index,
            "worst_dur_ns": wv.dur_ns,
            "worst_reference_ns": round(w.reference_ns),
            "worst_slowdown": round(w.ratio, 2),
            "worst_batch_size": b,
            "worst_ctas": ctas,
            "worst_spare_work_items": spare,
            "worst_chunk_tokens": wv.model.chunk_tokens if wv.model else None,
            "worst_longest_request_chunks": longest_chunks,
            "worst_max_kv_len": wv.batch.max_kv_len if wv.batch else None,
            "reference": w.reference,
        }
        fill = (f"the grid uses {ctas} of max_grid = {thr.max_grid} CTAs" if thr else f"the grid has {ctas} CTAs")
        cut = (f"its longest request ({evidence['worst_max_kv_len']:,} tokens) was cut into only "
               f"{longest_chunks} chunk{'s' if longest_chunks != 1 else ''}" if longest_chunks
               else "the longest request could be cut into only a few chunks")
        out.append(Finding(
            id=ID,
            severity=Severity.WARNING if w.ratio < 5 else Severity.CRITICAL,
            steps=tuple(steps),
            summary=(f"split-KV starved in {len(hits)} launches of {wv.kernel} (steps {step_ranges(steps)}): split "
                     f"on, yet up to {fmt_ns(wv.dur_ns)} vs {fmt_ns(w.reference_ns)} balanced ({w.ratio:.0f}x)"),
            evidence=evidence,
            explanation=(
                "Split-KV was on (a merge kernel follows), but the planner may only create as many work items as "
                f"its CTA budget allows, at least one per request. In step {wv.step.index} {fill}"
                + (f" with B = {b}, leaving {spare} spare work item{'s' if spare != 1 else ''}"
                   if spare is not None else "")
                + f", so {cut}. Those few CTAs ran long after the rest of the GPU had finished: "
                f"{fmt_ns(wv.dur_ns)} instead of about {fmt_ns(w.reference_ns)} (reference: {w.reference})."),
            remedy=remedies.remedy(ID, remedies.facts(ctx), backends=[wv.backend or ""],
                                   b_th=wv.threshold.b_threshold if wv.threshold else None),
            saving_ns=round(sum(h.excess_ns for h in hits)),
            step_saving_ns=by_step((h.view.step.index, h.excess_ns) for h in hits),
        ))
    return out


def _fa3_finding(ctx: TraceAnalysis, reason: str, hits: list[Slowdown]) -> Finding:
    """FA3 launches whose longest request was cut into too few splits, for one reason (fa3.why_starved)."""
    w = worst(hits)
    wv = w.view
    steps = steps_of(h.view for h in hits)
    got = fa3.longest_splits(wv)
    s_bound = fa3.static_bound(wv)
    heuristic = fa3.heuristic_splits(wv, ctx.schedule.gpu if ctx.schedule else None)
    call = (wv.batch.call if wv.batch is not None else None) or {}
    evidence = {
        "kernel": wv.kernel,
        "backend": wv.backend,
        "launches": len(hits),
        "why_starved": reason,
        "num_splits_static": s_bound,
        "call_num_splits": call.get("num_splits"),
        "worst_longest_request_splits": got,
        "heuristic_longest_request_splits": heuristic,
        "worst_step": wv.step.index,
        "worst_dur_ns": wv.dur_ns,
        "worst_reference_ns": round(w.reference_ns),
        "worst_slowdown": round(w.ratio, 2),
        "worst_batch_size": fa3.batch_size(wv),
        "worst_max_kv_len": wv.batch.max_kv_len if wv.batch else None,
        "reference": w.reference,
    }
    why = fa3.WORDS[reason] + (f" = {call.get('num_splits')}" if reason == fa3.FORCED else
                               f" = {s_bound}" if reason == fa3.BOUND and s_bound else "")
    cut = f"cut into only {got} split{'s' if got != 1 else ''}" if got else "cut into too few splits"
    return Finding(
        id=ID,
        severity=Severity.WARNING if w.ratio < 5 else Severity.CRITICAL,
        steps=tuple(steps),
        summary=(f"split-KV starved in {len(hits)} launches of {wv.kernel} (steps {step_ranges(steps)}): {why}; "
                 f"the longest request {cut}, up to {fmt_ns(wv.dur_ns)} vs {fmt_ns(w.reference_ns)} balanced "
                 f"({w.ratio:.0f}x)"),
        evidence=evidence,
        explanation=(
            f"FlashAttention-3 cut the longest request of step {wv.step.index}, but {why}: it was {cut}, and those "
            f"few CTAs ran long after the rest of the GPU had finished, {fmt_ns(wv.dur_ns)} instead of about "
            f"{fmt_ns(w.reference_ns)} (reference: {w.reference})"
            + (f"; FA3's own heuristic would cut it into {heuristic}." if heuristic else ".")),
        remedy=remedies.remedy(fa3.REMEDY[reason], remedies.facts(ctx), backends=[FA3], splits=heuristic),
        saving_ns=round(sum(h.excess_ns for h in hits)),
            step_saving_ns=by_step((h.view.step.index, h.excess_ns) for h in hits),
    )
