"""decode-on-prefill-kernel: a kernel named "Prefill" runs the decode steps.

FlashInfer's tensor-core decode path plans decode as a prefill with one query row per request, so traces show
`BatchPrefillWithPagedKVCacheKernel` (FA2 backend) or `PrefillWithKVCacheKernel` (SM90 backend) in decode
steps. The phase comes from the launch's context (the step's range name) or the kernel's template arguments
(MaskMode 0 with a 16-row query tile), or, when neither tells, from a sidecar batch recorded for the step.
The launches are selected in SQL (prefill_named_decode_launches.sql, the words from PREFILL_KERNEL_WORDS) and read
as the launch relation's columns; the saving is a replay on the CUDA-core path, in Python.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.launch_table import launch_column, launch_db, launch_relation, select_table
from traceinsight.diagnose.rule import Input
from traceinsight.diagnose.savings import excess_over_reference_ns, spread_by_time
from traceinsight.diagnose.views import LAUNCHES, LaunchView, spread_sample
from traceinsight.diagnose.whatif import path_alternative
from traceinsight.ingest.arrow_numpy import ints, numbers
from traceinsight.model.occupancy import CUDA_CORE, FA2, SM90
from traceinsight.units import fmt_ns

ID = "decode-on-prefill-kernel"
NAME = "Decode run by a prefill-named kernel"
DESCRIPTION = "Decode steps run by a kernel named 'Prefill' (FlashInfer's tensor-core decode path)."
PASSED = "no decode step ran on a prefill-named kernel"
NEEDS = (Input.STEPS,)
OPTIONAL = (Input.THRESHOLDS, Input.SIDECAR, Input.SCHEDULE)
USES = (LAUNCHES,)

# Words in a kernel's short name that mark it as a prefill kernel.
PREFILL_KERNEL_WORDS = ("Prefill",)

# Launches replayed on the CUDA-core path to price the saving (an even sample; the total is scaled up).
REPLAY_MAX_LAUNCHES = 24
# What the path implies for split-KV, by backend.
_SPLIT_POLICY = {
    FA2: "its planner targets only 2 CTAs per SM, so split-KV stops at B x H_kv >= 2 x num_SM",
    SM90: "this backend never splits a request along the KV axis",
}


def _decode_evidence(v: LaunchView) -> str:
    """Why a launch prefill_named_decode_launches.sql selected is decode: its phase's evidence (range name or
    template arguments), or the sidecar batch recorded for its step when the phase is unknown."""
    if v.launch.phase == "decode":
        return v.launch.phase_evidence
    step_key = v.batch.step_key if v.batch is not None else None
    return f"the sidecar describes step {v.step.index} as a decode batch (key {step_key!r})"


def _groups(ctx: TraceAnalysis) -> Iterator[tuple[np.ndarray, list[LaunchView]]]:
    """The selected launches per kernel name (in the order the names first appear): their positions in the launch
    relation (pos, in order) and the views of those a sidecar batch describes. Over the query's and the relation's
    columns: a trace on this path has 10^5-10^6 such launches, and only a sidecar's need their views."""
    result, views = select_table(ctx, "prefill_named_decode_launches", words=list(PREFILL_KERNEL_WORDS))
    if not result.num_rows:
        return
    pos = numbers(result.column("pos").combine_chunks())
    name_pos = numbers(result.column("name_pos").combine_chunks())
    source = launch_relation(ctx).column("batch_source").combine_chunks()
    words = source.dictionary.to_pylist()
    sidecar = np.zeros(len(views), bool)
    if "sidecar" in words:
        sidecar = ints(source.indices, -1) == words.index("sidecar")
    cuts = np.flatnonzero(name_pos[1:] != name_pos[:-1]) + 1
    for mine in np.split(pos, cuts):
        yield mine, [views[p] for p in mine[sidecar[mine]].tolist()]


def _median(values: np.ndarray) -> float:
    """statistics.median of these integers (the mean of the two middle ones, as a float, for an even count)."""
    n = len(values)
    half = n // 2
    if n % 2:
        return int(np.partition(values, half)[half])
    low, high = (int(x) for x in np.partition(values, (half - 1, half))[half - 1:half + 1])
    return (low + high) / 2


def _distinct_sorted(values: np.ndarray) -> list[int]:
    """The distinct values, ascending (np.unique without its index arrays imports numpy.ma: 70 ms of a short
    trace's analysis)."""
    got = np.sort(values)
    keep = np.ones(len(got), bool)
    keep[1:] = got[1:] != got[:-1]
    out: list[int] = got[keep].tolist()
    return out


def apply(ctx: TraceAnalysis) -> list[Finding]:
    out = []
    for group, known in _groups(ctx):
        v0 = launch_db(ctx)[1][int(group[0])]
        thr = v0.threshold
        saving = 0.0
        compared = 0
        if ctx.schedule is not None:
            for v in spread_sample(known, REPLAY_MAX_LAUNCHES):
                alt = path_alternative(ctx.schedule, CUDA_CORE, v.batch)  # type: ignore[arg-type]
                if alt is not None and alt.predicted_ns is not None:
                    compared += 1
                    saving += excess_over_reference_ns(v.dur_ns, alt.predicted_ns)
        if compared:
            saving *= len(known) / compared
        policy = _SPLIT_POLICY.get(v0.backend or "", "its split-KV policy differs from the CUDA-core kernel's")
        b_th = thr.b_threshold if thr else None
        median_dur_ns = round(_median(launch_column(ctx, "dur_ns")[group]))
        evidence = {
            "kernel": v0.kernel,
            "backend": v0.backend,
            "launches": len(group),
            "phase_evidence": _decode_evidence(v0),
            "grid": list(v0.launch.attention.grid),
            "median_dur_ns": median_dur_ns,
            "b_threshold": b_th,
            "launches_replayed_on_cuda_core": compared,
        }
        thr_text = (f"split-KV off from B = {b_th}" if b_th else "no split-KV at all") if thr else ""
        out.append(Finding(
            id=ID,
            severity=Severity.WARNING,
            steps=tuple(_distinct_sorted(launch_column(ctx, "step")[group])),
            summary=(f"{len(group)} decode launches ran on {v0.kernel} ({v0.backend}): the tensor-core decode path, "
                     f"{thr_text or 'a different split-KV policy'}; median {fmt_ns(median_dur_ns)}"),
            evidence=evidence,
            explanation=(
                f"The kernel is called '{v0.kernel}', but these launches are decode steps: FlashInfer's tensor-core "
                "decode path reuses its prefill kernel with one query row per request "
                f"({_decode_evidence(v0)}). It is not a mislabelled prefill. It matters because {policy}, "
                "so with one long request in the batch this path loses its balance at much smaller batches than "
                "the CUDA-core decode kernel (or never has it), and a decode step looks like prefill work in "
                "every profiler."),
            remedy=(
                "If your model's GQA group allows it, decode on the CUDA-core path (FlashInfer "
                "use_tensor_cores=False; SGLang picks tensor cores for G >= 4 unless overridden), or pin the FA2 "
                "backend and keep the batch below its split threshold; compare with `traceinsight whatif`."),
            saving_ns=round(saving) if compared else None,
            step_saving_ns=spread_by_time(saving, [(v.step.index, v.dur_ns) for v in known]) if compared else {},
        ))
    return out
