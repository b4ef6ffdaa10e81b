"""split-kv-off: the planner stopped splitting long requests along KV and one CTA walked a long request alone.

FlashInfer's CUDA-core and FA2 planners split a request's KV into chunks only while the CTA count stays under
max_grid (occupancy x num_SM for CUDA-core, 2 x num_SM for FA2). At B x H_kv >= max_grid (B >= B_th) nothing
is split; a request far longer than the rest is then walked by one CTA per KV head while the other SMs
finish and wait. Detected without a sidecar from the trace alone: no merge kernel follows the launch, and the
launch takes far longer than this kernel's balanced (split-on) launches.

FlashAttention-3 cuts requests in its prepare kernel; no request is cut (whether or not a combine kernel runs)
when the batch is above its dynamic-split cap of 992 requests, when the call forced num_splits = 1, or when its
static heuristic chose one split (`traceinsight.diagnose.fa3`): each is its own finding, with its own remedy.
"""

from __future__ import annotations

from traceinsight.diagnose import fa3, remedies
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.rule import Input, limit
from traceinsight.diagnose.savings import by_step
from traceinsight.diagnose.slowdown import Slowdown, slow_launches, worst
from traceinsight.diagnose.views import LAUNCHES, step_ranges, steps_of
from traceinsight.model.occupancy import CUDA_CORE, FA2, FA3, FA3_MAX_DYNAMIC_SPLIT_BATCH
from traceinsight.units import fmt_ns

ID = "split-kv-off"
NAME = "Split-KV off"
DESCRIPTION = "Launches whose planner left long requests unsplit, so one CTA walked them alone."
PASSED = "no unsplit launch was much slower than the kernel's balanced launches"
NEEDS = (Input.STEPS, Input.THRESHOLDS)
OPTIONAL = (Input.SIDECAR, Input.SCHEDULE)
USES = (LAUNCHES,)

# Backends whose split decision is modeled: a CTA budget (FlashInfer, a merge kernel shows it) or FA3's prepare
# kernel (its cap, the call's num_splits, its static heuristic).
BACKENDS = (CUDA_CORE, FA2, FA3)
# A split-off launch is a finding when it takes at least this many times its balanced reference...
SLOWDOWN_MIN_RATIO = 2.0
# ...and at least this much longer (ns).
EXCESS_MIN_NS = 100_000


def apply(ctx: TraceAnalysis) -> list[Finding]:
    ratio_min = limit(ctx, ID, "SLOWDOWN_MIN_RATIO", SLOWDOWN_MIN_RATIO)
    excess_min = limit(ctx, ID, "EXCESS_MIN_NS", EXCESS_MIN_NS)
    out: list[Finding] = []
    for hits in slow_launches(ctx, BACKENDS, False, ratio_min, excess_min):
        if hits[0].view.backend == FA3:
            by_reason: dict[str | None, list[Slowdown]] = {}
            for h in hits:
                by_reason.setdefault(fa3.why_unsplit(h.view), []).append(h)
            out.extend(_fa3_finding(ctx, reason, group) for reason, group in by_reason.items())
            continue
        w = worst(hits)
        wv = w.view
        thr = wv.threshold
        b_th = thr.b_threshold if thr else None
        sizes = [h.view.batch_size for h in hits if h.view.batch_size is not None]
        steps = steps_of(h.view for h in hits)
        max_len = wv.batch.max_kv_len if wv.batch else None
        total = wv.batch.total_kv_tokens if wv.batch else None
        evidence = {
            "kernel": wv.kernel,
            "backend": wv.backend,
            "launches": len(hits),
            "b_threshold": b_th,
            "kv_heads": thr.kv_heads if thr else None,
            "max_grid": thr.max_grid if thr else None,
            "occupancy": thr.occupancy if thr else None,
            "batch_size_min": min(sizes) if sizes else None,
            "batch_size_max": max(sizes) if sizes else None,
            "launches_at_or_above_b_threshold": sum(1 for b in sizes if b_th is not None and b >= b_th),
            "worst_step": wv.step.index,
            "worst_dur_ns": wv.dur_ns,
            "worst_reference_ns": round(w.reference_ns),
            "worst_slowdown": round(w.ratio, 2),
            "worst_batch_size": wv.batch_size,
            "worst_max_kv_len": max_len,
            "worst_total_kv_tokens": total,
            "worst_grid": list(wv.launch.attention.grid),
            "reference": w.reference,
            "batch_source": wv.batch.source if wv.batch else None,
        }
        why_long = (f"its longest request holds {max_len:,} of {total:,} KV tokens" if max_len and total
                    else "the launch time points to one request far longer than the rest")
        bsz = f"B = {wv.batch_size}" if wv.batch_size else "the batch size is unknown"
        budget = (f"max_grid = {thr.max_grid} CTAs" if thr else "its CTA budget")
        below = (f"; with {thr.kv_heads} KV heads that means batches below B_th = {b_th} requests"
                 if thr and b_th else "")
        out.append(Finding(
            id=ID,
            severity=Severity.CRITICAL,
            steps=tuple(steps),
            summary=(f"split-KV off in {len(hits)} launches of {wv.kernel} (steps {step_ranges(steps)}): up to "
                     f"{fmt_ns(wv.dur_ns)} vs {fmt_ns(w.reference_ns)} balanced ({w.ratio:.0f}x)"
                     + (f"; B_th = {b_th}" if b_th else "")),
            evidence=evidence,
            explanation=(
                "Decode attention normally cuts long requests into chunks so that every SM gets a similar share "
                f"of the work. {wv.backend}'s planner only does so while the CTA count stays under {budget}{below}. "
                f"In step {wv.step.index} ({bsz}; no merge kernel follows, so nothing was split) {why_long}, so "
                "one CTA per KV head walked that request alone while the other SMs finished early and sat idle: "
                f"{fmt_ns(wv.dur_ns)} instead of about {fmt_ns(w.reference_ns)} for the same work spread evenly "
                f"(reference: {w.reference})."),
            remedy=remedies.remedy(ID, remedies.facts(ctx), backends=[wv.backend or ""], b_th=b_th,
                                   cap=b_th - 1 if b_th else None),
            saving_ns=round(sum(h.excess_ns for h in hits)),
            step_saving_ns=by_step((h.view.step.index, h.excess_ns) for h in hits),
        ))
    return out


def _fa3_finding(ctx: TraceAnalysis, reason: str | None, hits: list[Slowdown]) -> Finding:
    """FA3 launches that cut no request, for one reason (fa3.why_unsplit)."""
    w = worst(hits)
    wv = w.view
    steps = steps_of(h.view for h in hits)
    sizes = [b for h in hits if (b := fa3.batch_size(h.view)) is not None]
    s_bound = fa3.static_bound(wv)
    call = (wv.batch.call if wv.batch is not None else None) or {}
    max_len = wv.batch.max_kv_len if wv.batch else None
    why = fa3.WORDS.get(reason or "", "no request was cut (why is not visible without the call's arguments)")
    if reason == fa3.FORCED:
        why += f" = {call.get('num_splits')}"
    heuristic = fa3.heuristic_splits(wv, ctx.schedule.gpu if ctx.schedule else None)
    evidence = {
        "kernel": wv.kernel,
        "backend": wv.backend,
        "launches": len(hits),
        "why_unsplit": reason,
        "b_threshold": FA3_MAX_DYNAMIC_SPLIT_BATCH + 1,
        "batch_size_min": min(sizes) if sizes else None,
        "batch_size_max": max(sizes) if sizes else None,
        "num_splits_static": s_bound,
        "call_num_splits": call.get("num_splits"),
        "heuristic_longest_request_splits": heuristic,
        "combine_kernel": bool(wv.launch.merges),
        "worst_step": wv.step.index,
        "worst_dur_ns": wv.dur_ns,
        "worst_reference_ns": round(w.reference_ns),
        "worst_slowdown": round(w.ratio, 2),
        "worst_batch_size": fa3.batch_size(wv),
        "worst_max_kv_len": max_len,
        "reference": w.reference,
        "batch_source": wv.batch.source if wv.batch else None,
    }
    combine = (" (a combine kernel still ran: the static bound S was above 1, but the metadata cut nothing)"
               if wv.launch.merges else "")
    long = f"its longest request ({max_len:,} KV tokens)" if max_len else "its longest request"
    return Finding(
        id=ID,
        severity=Severity.CRITICAL,
        steps=tuple(steps),
        summary=(f"split-KV off in {len(hits)} launches of {wv.kernel} (steps {step_ranges(steps)}): {why}; up to "
                 f"{fmt_ns(wv.dur_ns)} vs {fmt_ns(w.reference_ns)} balanced ({w.ratio:.0f}x)"),
        evidence=evidence,
        explanation=(
            "FlashAttention-3 cuts long requests into splits in its prepare kernel, up to a static bound S, so "
            f"that every SM gets a share of the work. In step {wv.step.index} "
            + (f"(B = {evidence['worst_batch_size']}) " if evidence["worst_batch_size"] else "")
            + f"{why}, so no request was cut{combine}: {long} was walked by one CTA per KV head while the other "
            f"SMs finished and sat idle, {fmt_ns(wv.dur_ns)} instead of about {fmt_ns(w.reference_ns)} for the "
            f"same work spread evenly (reference: {w.reference})."),
        remedy=remedies.remedy(fa3.REMEDY.get(reason or "", "fa3-batch-cap"), remedies.facts(ctx),
                               backends=[FA3], splits=heuristic, cap=FA3_MAX_DYNAMIC_SPLIT_BATCH),
        saving_ns=round(sum(h.excess_ns for h in hits)),
            step_saving_ns=by_step((h.view.step.index, h.excess_ns) for h in hits),
    )
