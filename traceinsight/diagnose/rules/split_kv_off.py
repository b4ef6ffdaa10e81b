"""split-kv-off: the planner stopped splitting long requests along KV and one CTA walked a long request alone.

FlashInfer's CUDA-core and FA2 planners split a request's KV into chunks only while the CTA count stays under
max_grid (occupancy x num_SM for CUDA-core, 2 x num_SM for FA2). At B x H_kv >= max_grid (B >= B_th) nothing
is split; a request far longer than the rest is then walked by one CTA per KV head while the other SMs
finish and wait. Detected without a sidecar from the trace alone: no merge kernel follows the launch, and the
launch takes far longer than this kernel's balanced (split-on) launches.
"""

from __future__ import annotations

from traceinsight.diagnose import remedies
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.rule import Input, limit
from traceinsight.diagnose.views import fmt_ms, slow_launches, step_ranges, steps_of, worst
from traceinsight.model.occupancy import CUDA_CORE, FA2

ID = "split-kv-off"
NAME = "Split-KV off"
DESCRIPTION = "Launches whose planner left long requests unsplit, so one CTA walked them alone."
PASSED = "no unsplit launch was much slower than the kernel's balanced launches"
NEEDS = (Input.STEPS, Input.THRESHOLDS)
OPTIONAL = (Input.SIDECAR, Input.SCHEDULE)

# Backends whose split-KV is decided by a CTA budget and shows as a merge kernel.
BACKENDS = (CUDA_CORE, FA2)
# A split-off launch is a finding when it takes at least this many times its balanced reference...
SLOWDOWN_MIN_RATIO = 2.0
# ...and at least this much longer (ns).
EXCESS_MIN_NS = 100_000


def apply(ctx: TraceAnalysis) -> list[Finding]:
    ratio_min = limit(ctx, ID, "SLOWDOWN_MIN_RATIO", SLOWDOWN_MIN_RATIO)
    excess_min = limit(ctx, ID, "EXCESS_MIN_NS", EXCESS_MIN_NS)
    out = []
    for hits in slow_launches(ctx, BACKENDS, False, ratio_min, excess_min):
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
                     f"{fmt_ms(wv.dur_ns)} vs {fmt_ms(w.reference_ns)} balanced ({w.ratio:.0f}x)"
                     + (f"; B_th = {b_th}" if b_th else "")),
            evidence=evidence,
            explanation=(
                "Decode attention normally cuts long requests into chunks so that every SM gets a similar share "
                f"of the work. {wv.backend}'s planner only does so while the CTA count stays under {budget}{below}. "
                f"In step {wv.step.index} ({bsz}; no merge kernel follows, so nothing was split) {why_long}, so "
                "one CTA per KV head walked that request alone while the other SMs finished early and sat idle: "
                f"{fmt_ms(wv.dur_ns)} instead of about {fmt_ms(w.reference_ns)} for the same work spread evenly "
                f"(reference: {w.reference})."),
            remedy=remedies.remedy(ID, remedies.facts(ctx), backends=[wv.backend or ""], b_th=b_th,
                                   cap=b_th - 1 if b_th else None),
            saving_ns=round(sum(h.excess_ns for h in hits)),
        ))
    return out
