"""kv-bandwidth: balanced decode launches stream their KV cache far below the GPU's HBM bandwidth.

Decode attention is memory-bound: a launch reads every KV byte of the batch once (tokens x 2 x head_dim x H_kv
x bytes per element). Achieved bandwidth = those bytes / kernel time, against the GPU's peak. Launches already
explained by load imbalance (split-KV off or starved, tails) are left out: this is about the kernel's
streaming efficiency when the work is even.

Its selection is SQL (kv_bandwidth_launches.sql): the launches rated, their efficiency, each kernel's median
efficiency (statistics.median's, written out in the query) and the launches below the bar. The KV bytes a launch
reads come from its step's sidecar batch (tokens, heads, head_dim, dtype), not from the launch relation: the
rule computes them (`kv_bytes`) and hands them to the query as a relation of its own (launch_kv_bytes).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.launch_table import int64_relation, launch_db, select_groups
from traceinsight.diagnose.rule import Input, limit
from traceinsight.diagnose.savings import bandwidth_saving_ns, by_step
from traceinsight.diagnose.views import LAUNCHES, LaunchView, step_ranges, steps_of
from traceinsight.model.batches import KV_DTYPE_BYTES

ID = "kv-bandwidth"
NAME = "KV-cache bandwidth efficiency"
DESCRIPTION = "Decode launches that read the KV cache at a small share of peak HBM bandwidth."
PASSED = "decode launches not slowed by imbalance streamed KV at a reasonable share of peak bandwidth"
NEEDS = (Input.STEPS, Input.SIDECAR, Input.BANDWIDTH)
OPTIONAL = ()
USES = (LAUNCHES,)

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


def launch_kv_bytes(views: Sequence[LaunchView]) -> pa.Table:
    """The launch_kv_bytes relation of kv_bandwidth_launches.sql: (pos, kv_bytes) of the launches whose KV bytes
    are known, pos indexing `views` (launch_table.launch_db's)."""
    pos: list[int] = []
    nbytes: list[int] = []
    for i, v in enumerate(views):
        b = kv_bytes(v)
        if b is not None:
            pos.append(i)
            nbytes.append(b)
    return int64_relation(pos=np.array(pos, np.int64), kv_bytes=np.array(nbytes, np.int64))


def apply(ctx: TraceAnalysis) -> list[Finding]:
    assert ctx.schedule is not None and ctx.schedule.gpu is not None
    peak = float(ctx.schedule.gpu.hbm_bandwidth_bytes_per_s or 0)
    eff_min = limit(ctx, ID, "EFFICIENCY_MIN", EFFICIENCY_MIN)
    target = limit(ctx, ID, "EFFICIENCY_TARGET", EFFICIENCY_TARGET)
    explained = sorted({s for f in ctx.findings if f.id in EXPLAINED_BY for s in f.steps})
    _, views = launch_db(ctx)
    out = []
    for group in select_groups(ctx, "kv_bandwidth_launches", {"launch_kv_bytes": launch_kv_bytes(views)},
                               peak=peak, eff_min=eff_min, explained=explained):
        # Each row: the launch's view, (kv_bytes, efficiency, the kernel's median and best efficiency).
        low = [(v, row[0], row[1]) for v, row in group]
        median_eff, best_eff = group[0][1][2], group[0][1][3]
        v0 = low[0][0]
        steps = steps_of(r[0] for r in low)
        median_rate = round(statistics.median(r[1] / (r[0].dur_ns * 1e-9) for r in low))
        evidence = {
            "kernel": v0.kernel,
            "backend": v0.backend,
            "launches": len(low),
            "median_efficiency": round(median_eff, 3),
            "best_efficiency": round(best_eff, 3),
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
                f"moved their KV at only {median_eff:.0%} of the GPU's peak (best launch {best_eff:.0%}): fixed "
                "per-launch costs, too few bytes in flight per SM, or the split/merge overhead dominate at this "
                "batch and length."),
            remedy=("Compare attention backends on this shape with `traceinsight whatif`; larger batches or longer "
                    "KV per step amortize fixed costs; an fp8 KV cache halves the bytes to move."),
            saving_ns=round(sum(bandwidth_saving_ns(r[0].dur_ns, r[1], peak, target) for r in low)),
            step_saving_ns=by_step((r[0].step.index, bandwidth_saving_ns(r[0].dur_ns, r[1], peak, target))
                                   for r in low),
        ))
    return out
