"""kv-bandwidth: balanced decode launches stream their KV cache far below the GPU's HBM bandwidth.

Decode attention is memory-bound: a launch reads every KV byte of the batch once (tokens x 2 x head_dim x H_kv
x bytes per element). Achieved bandwidth = those bytes / kernel time, against the GPU's peak. Launches already
explained by load imbalance (split-KV off or starved, tails) are left out: this is about the kernel's
streaming efficiency when the work is even.

Not moved to SQL yet (issue 13): the bytes a launch reads come from its sidecar batch (tokens, heads, dtype),
and the per-kernel cut is a median of float efficiencies, where DuckDB's interpolated median (lo + (hi - lo) / 2)
may differ by an ulp from statistics.median's (lo + hi) / 2 at even counts: moving it needs those columns on the
launch relation and the median kept in Python.
"""

from __future__ import annotations

import statistics

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.rule import Input, limit
from traceinsight.diagnose.savings import bandwidth_saving_ns
from traceinsight.diagnose.views import LaunchView, by_kernel, launch_views, step_ranges, steps_of
from traceinsight.model.batches import KV_DTYPE_BYTES

ID = "kv-bandwidth"
NAME = "KV-cache bandwidth efficiency"
DESCRIPTION = "Decode launches that read the KV cache at a small share of peak HBM bandwidth."
PASSED = "decode launches not slowed by imbalance streamed KV at a reasonable share of peak bandwidth"
NEEDS = (Input.STEPS, Input.SIDECAR, Input.BANDWIDTH)
OPTIONAL = ()

# Report a kernel whose median balanced launch reaches less than this share of peak HBM bandwidth.
EFFICIENCY_MIN = 0.5
# The saving assumes the kernel could reach this share of peak.
EFFICIENCY_TARGET = 0.8
# Bytes per KV element when the sidecar does not say (bf16).
DEFAULT_KV_BYTES = 2
# Findings that already explain their launches' time.
EXPLAINED_BY = ("split-kv-off", "split-kv-starved", "tail-ctas")
# Rules whose findings this rule reads (declared: the registry shows it only those).
READS = EXPLAINED_BY


def kv_bytes(v: LaunchView) -> int | None:
    """KV bytes the launch reads: tokens x 2 (K and V) x head_dim x H_kv x bytes per element."""
    b = v.batch
    if b is None or b.total_kv_tokens is None or not b.kv_heads:
        return None
    head_dim = b.head_dim or v.launch.attention.params.get("head_dim")
    if not head_dim:
        return None
    elem = KV_DTYPE_BYTES.get((b.kv_dtype or "").lower(), DEFAULT_KV_BYTES)
    return b.total_kv_tokens * 2 * int(head_dim) * b.kv_heads * elem


def apply(ctx: TraceAnalysis) -> list[Finding]:
    assert ctx.schedule is not None and ctx.schedule.gpu is not None
    peak = float(ctx.schedule.gpu.hbm_bandwidth_bytes_per_s or 0)
    eff_min = limit(ctx, ID, "EFFICIENCY_MIN", EFFICIENCY_MIN)
    target = limit(ctx, ID, "EFFICIENCY_TARGET", EFFICIENCY_TARGET)
    explained = {s for f in ctx.findings if f.id in EXPLAINED_BY for s in f.steps}
    out = []
    for same in by_kernel(launch_views(ctx)).values():
        rated = []
        for v in same:
            nbytes = kv_bytes(v)
            if nbytes is None or v.dur_ns <= 0 or v.step.index in explained:
                continue
            rated.append((v, nbytes, nbytes / (v.dur_ns * 1e-9) / peak))
        if not rated:
            continue
        median_eff = statistics.median(r[2] for r in rated)
        if median_eff >= eff_min:
            continue
        low = [r for r in rated if r[2] < eff_min]
        best = max(rated, key=lambda r: r[2])
        v0 = low[0][0]
        steps = steps_of(r[0] for r in low)
        median_rate = round(statistics.median(r[1] / (r[0].dur_ns * 1e-9) for r in low))
        evidence = {
            "kernel": v0.kernel,
            "backend": v0.backend,
            "launches": len(low),
            "median_efficiency": round(median_eff, 3),
            "best_efficiency": round(best[2], 3),
            "median_bytes_per_s": median_rate,
            "peak_bytes_per_s": peak,
            "median_kv_bytes": round(statistics.median(r[1] for r in low)),
            "target_efficiency": target,
        }
        out.append(Finding(
            id=ID,
            severity=Severity.INFO,
            steps=tuple(steps),
            summary=(f"{v0.kernel} reads KV at a median {median_eff:.0%} of peak HBM bandwidth "
                     f"({median_rate / 1e12:.2f} of {peak / 1e12:.2f} TB/s) in {len(low)} "
                     f"launches not slowed by imbalance (steps {step_ranges(steps)})"),
            evidence=evidence,
            explanation=(
                "A decode step must read the whole KV cache of its batch once, so its floor is KV bytes / HBM "
                "bandwidth. These launches were not slowed by load imbalance (no other finding explains them), yet "
                f"moved their KV at only {median_eff:.0%} of the GPU's peak (best launch {best[2]:.0%}): fixed "
                "per-launch costs, too few bytes in flight per SM, or the split/merge overhead dominate at this "
                "batch and length."),
            remedy=("Compare attention backends on this shape with `traceinsight whatif`; larger batches or longer "
                    "KV per step amortize fixed costs; an fp8 KV cache halves the bytes to move."),
            saving_ns=round(sum(bandwidth_saving_ns(r[0].dur_ns, r[1], peak, target) for r in low)),
        ))
    return out
