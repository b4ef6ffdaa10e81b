"""Attach the schedule model to a trace's steps: per attention kernel variant its occupancy and split-KV
threshold; per step its batch composition (from a sidecar, or bounded from the trace); per launch the
planner's work items and the simulated schedule; per launch the Nsight Compute measurement when one was
matched; and the GPU's idle gaps between steps. Times in ns, sizes in bytes, lengths in tokens.

Everything here reads the trace (and its sidecar / ncu rows) only; what is unknown stays None with a note
saying why, never a guess presented as a fact.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from traceinsight.ingest.sidecar import CALL_FIELDS, key_matches
from traceinsight.ingest.store import TraceDB
from traceinsight.model.calibration import calibrate
from traceinsight.model.gpus import GPU, gpu_for
from traceinsight.model.occupancy import BACKENDS, CUDA_CORE, FA2, FA3, SM90, occupancy_limits
from traceinsight.model.occupancy import threshold as backend_threshold
from traceinsight.model.phases import PREFILL_PHASES, phase_from_query_lengths, tile_padding
from traceinsight.model.planners import Batch, Plan, plan
from traceinsight.model.simulate import CostModel, SimResult, simulate
from traceinsight.model.steps import Kernel, Launch, Step
from traceinsight.queries import sql

# Where each backend's grid holds the KV heads (KERNELS.md §1, §2): axis index into (x, y, z).
KV_HEADS_GRID_AXIS: dict[str, int] = {CUDA_CORE: 1, FA2: 2}
# Bytes per KV element by the sidecar's kv_dtype.
KV_DTYPE_BYTES: dict[str, int] = {"fp8": 1, "e4m3": 1, "e5m2": 1, "float8_e4m3fn": 1, "bf16": 2, "bfloat16": 2,
                                  "fp16": 2, "float16": 2, "half": 2, "fp32": 4, "float32": 4}
# A launch is "balanced" (used to calibrate the cost model) when its longest work item is at most this many
# times its mean work item (KV tokens).
BALANCED_MAX_ITEM_RATIO = 1.5
# Balanced launches needed to calibrate a kernel's cost model, and the most used (spread over the work range).
MIN_CALIBRATION_SAMPLES = 2
CALIBRATION_MAX_SAMPLES = 16
# Cost-model shape parameters fitted on the trace besides speed and launch time (none: keep the prior shape).
CALIBRATION_FIT: tuple[str, ...] = ()
# Shortest GPU idle gap between two steps worth recording (ns).
IDLE_GAP_RECORD_NS = 1_000


@dataclass(frozen=True)
class KernelThreshold:
    """Occupancy and split-KV threshold of one attention kernel variant (distinct kernel name) on this GPU.

    occupancy: resident CTAs per SM from registers/threads/shared memory; max_grid: the CTA count its planner
    targets; b_threshold: smallest batch at which no request can be split any more (None: never splits);
    kv_heads_source: where kv_heads came from ('grid.y', 'grid.z', 'sidecar').
    """

    kernel: str
    name: str
    backend: str
    kv_heads: int | None
    kv_heads_source: str | None
    occupancy: int
    occupancy_limiter: str
    max_grid: int
    b_threshold: int | None
    registers_per_thread: int | None
    threads_per_block: int
    smem_bytes: int | None
    num_sms: int

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "backend": self.backend,
            "kv_heads": self.kv_heads,
            "occupancy": self.occupancy,
            "max_grid": self.max_grid,
            "b_threshold": self.b_threshold,
            "name": self.name,
            "kv_heads_source": self.kv_heads_source,
            "occupancy_limiter": self.occupancy_limiter,
            "registers_per_thread": self.registers_per_thread,
            "threads_per_block": self.threads_per_block,
            "smem_bytes": self.smem_bytes,
            "num_sms": self.num_sms,
        }


@dataclass(frozen=True)
class StepBatch:
    """A step's batch composition: exact from a sidecar (source 'sidecar'), or bounded from the trace
    (source 'trace'). Unknown values are None; `known` says in words what is known and from what.

    batch_size_min / batch_size_max: bounds on B (equal to batch_size when exact); kv_lens: every request's KV
    length (tokens, sidecar only); shape fields from the sidecar or the kernel's grid/block.
    """

    source: str
    step_key: str | None
    batch_size: int | None
    batch_size_min: int | None
    batch_size_max: int | None
    kv_lens: tuple[int, ...] | None
    qo_heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    page_size: int | None = None
    kv_dtype: str | None = None
    backend: str | None = None
    cuda_graph: bool | None = None
    planned_split_kv: bool | None = None
    planned_padded_batch: int | None = None
    known: tuple[str, ...] = ()
    call: dict[str, Any] | None = None  # the attention call's recorded arguments (sidecar `call`)
    planned_splits: tuple[int, ...] | None = None  # FA3: splits per request as its scheduler metadata says
    planned_num_splits: int | None = None  # FA3: the static split bound S

    @property
    def total_kv_tokens(self) -> int | None:
        return sum(self.kv_lens) if self.kv_lens is not None else None

    @property
    def max_kv_len(self) -> int | None:
        return max(self.kv_lens) if self.kv_lens else None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "step_key": self.step_key,
            "batch_size": self.batch_size,
            "batch_size_min": self.batch_size_min,
            "batch_size_max": self.batch_size_max,
            "total_kv_tokens": self.total_kv_tokens,
            "max_kv_len": self.max_kv_len,
            "qo_heads": self.qo_heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "page_size": self.page_size,
            "kv_dtype": self.kv_dtype,
            "cuda_graph": self.cuda_graph,
            "planned_split_kv": self.planned_split_kv,
            "planned_padded_batch": self.planned_padded_batch,
            "known": list(self.known),
            "call": self.call,
            "planned_num_splits": self.planned_num_splits,
            "requests_cut": (sum(1 for x in self.planned_splits if x > 1)
                             if self.planned_splits is not None else None),
        }


@dataclass(frozen=True)
class LaunchModel:
    """The schedule model of one attention launch.

    source: 'sidecar' (planned from the exact batch) or 'trace' (what the grid alone says); work_items: CTAs
    (or persistent tiles) doing work; chunk_tokens: KV chunk length (None: not split or varies);
    split_kv: the planner's split decision (trace: merge kernel present); predicted_ns / sm_idle / tail_ns:
    the simulated time, SM idle fraction (0..1) and tail (time with fewer than half the SMs busy), None
    without a calibrated cost model; plan / sim: the planner's and simulator's full output (not in JSON);
    grid_matches: the planned grid equals the traced one (None when not planned); balanced_ns: the same work
    at full-GPU throughput (`throughput_floor_ns`), what the launch would take perfectly balanced.
    """

    kernel_id: int
    source: str
    work_items: int | None
    chunk_tokens: int | None
    split_kv: bool | None
    predicted_ns: int | None
    sm_idle: float | None
    tail_ns: int | None
    plan: Plan | None = field(default=None, repr=False, compare=False)
    sim: SimResult | None = field(default=None, repr=False, compare=False)
    grid_matches: bool | None = None
    longest_item_tokens: int | None = None
    mean_item_tokens: float | None = None
    note: str | None = None
    balanced_ns: int | None = None

    @property
    def imbalance(self) -> float | None:
        """Longest work item over the mean work item (KV tokens); 1.0 is perfectly even."""
        if self.longest_item_tokens is None or not self.mean_item_tokens:
            return None
        return self.longest_item_tokens / self.mean_item_tokens

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "work_items": self.work_items,
            "chunk_tokens": self.chunk_tokens,
            "split_kv": self.split_kv,
            "predicted_ns": self.predicted_ns,
            "sm_idle": round(self.sm_idle, 4) if self.sm_idle is not None else None,
            "tail_ns": self.tail_ns,
            "grid_matches": self.grid_matches,
            "longest_item_tokens": self.longest_item_tokens,
            "balanced_ns": self.balanced_ns,
            "note": self.note,
        }


@dataclass(frozen=True)
class Measured:
    """Nsight Compute's per-SM active cycles of one launch (cycles): least busy SM, mean, busiest SM."""

    ncu_id: int
    sm_active_min: float | None
    sm_active_avg: float | None
    sm_active_max: float | None

    @property
    def sm_idle(self) -> float | None:
        """1 - avg/max: the share of the busiest SM's time the average SM sat idle."""
        if self.sm_active_avg is None or not self.sm_active_max:
            return None
        return 1.0 - self.sm_active_avg / self.sm_active_max

    def to_json(self) -> dict[str, Any]:
        return {"sm_active_min": self.sm_active_min, "sm_active_avg": self.sm_active_avg,
                "sm_active_max": self.sm_active_max, "ncu_id": self.ncu_id,
                "sm_idle": round(self.sm_idle, 4) if self.sm_idle is not None else None}


class IdleGap(NamedTuple):
    """A stretch with no kernel or memory operation on the GPU, just before step `before_step` (ns). A named
    tuple: a long trace has a gap between most of its steps (1.7M at 1M kernels), made at C speed."""

    start_ns: int
    end_ns: int
    before_step: int

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class Schedule:
    """The schedule model attached to one trace.

    gpu: the GPU model (None when unknown: then nothing below is computed and `notes` says why);
    thresholds: by kernel name; batches: by step index; models / measured: by attention kernel_id;
    costs: calibrated cost model by kernel name; idle_gaps: GPU idle time between steps; notes: what could
    not be modelled, in words.
    """

    gpu: GPU | None
    thresholds: dict[str, KernelThreshold] = field(default_factory=dict)
    batches: dict[int, StepBatch] = field(default_factory=dict)
    models: dict[int, LaunchModel] = field(default_factory=dict)
    measured: dict[int, Measured] = field(default_factory=dict)
    costs: dict[str, CostModel] = field(default_factory=dict)
    idle_gaps: list[IdleGap] = field(default_factory=list)
    cuda_graph_kernels: frozenset[int] = frozenset()
    notes: list[str] = field(default_factory=list)
    cache: dict[Any, Any] = field(default_factory=dict, repr=False)  # memo for counterfactual replays

    def threshold_for(self, kernel: Kernel) -> KernelThreshold | None:
        return self.thresholds.get(kernel.name)

    def occupancy_for(self, kernel: Kernel) -> int | None:
        t = self.thresholds.get(kernel.name)
        return t.occupancy if t else None


# ---------------------------------------------------------------------------------------------- thresholds
def _threads(k: Kernel) -> int:
    x, y, z = k.block
    return max(x, 1) * max(y, 1) * max(z, 1) if any(k.block) else 0


def _grid_kv_heads(k: Kernel) -> tuple[int | None, str | None]:
    axis = KV_HEADS_GRID_AXIS.get(k.backend or "")
    if axis is None or not k.grid[axis]:
        return None, None
    return k.grid[axis], f"grid.{'xyz'[axis]}"


def kernel_threshold(k: Kernel, gpu: GPU, kv_heads_hint: int | None = None) -> KernelThreshold | None:
    """Occupancy, max_grid and B_th of kernel `k` (one launch of the variant) on `gpu`; None for a backend the
    model does not know. kv_heads: from the grid where the backend puts them, else `kv_heads_hint` (sidecar)."""
    backend = k.backend or ""
    if backend not in BACKENDS:
        return None
    threads = _threads(k)
    lim = occupancy_limits(gpu, k.registers_per_thread or 0, threads, k.smem_bytes or 0)
    kv_heads, src = _grid_kv_heads(k)
    if kv_heads is None and kv_heads_hint:
        kv_heads, src = kv_heads_hint, "sidecar"
    if kv_heads is None:
        if backend == SM90:
            t = backend_threshold(backend, lim.blocks, gpu.num_sms, 1)
            return KernelThreshold(k.kernel, k.name, backend, None, None, lim.blocks, lim.limiter, t.max_grid,
                                   None, k.registers_per_thread, threads, k.smem_bytes, gpu.num_sms)
        return KernelThreshold(k.kernel, k.name, backend, None, None, lim.blocks, lim.limiter,
                               gpu.num_sms if backend == FA3 else lim.blocks * gpu.num_sms, None,
                               k.registers_per_thread, threads, k.smem_bytes, gpu.num_sms)
    t = backend_threshold(backend, lim.blocks, gpu.num_sms, kv_heads)
    return KernelThreshold(k.kernel, k.name, backend, kv_heads, src, lim.blocks, lim.limiter, t.max_grid,
                           t.b_threshold, k.registers_per_thread, threads, k.smem_bytes, gpu.num_sms)


# ---------------------------------------------------------------------------------------------- batches
def _dtype_bytes(kv_dtype: str | None) -> int:
    return KV_DTYPE_BYTES.get((kv_dtype or "bf16").lower(), 2)


def sidecar_rows(db: TraceDB, trace_id: int) -> list[dict[str, Any]]:
    """The `batches` rows attached to the trace."""
    return db.rows("SELECT * FROM batches WHERE trace_id = $t ORDER BY step_key", {"t": trace_id})


def match_sidecar(step: Step, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The sidecar row whose key matches the step's range name (`sidecar.key_matches`; the key with the most
    tokens wins); None for steps that are not ranges or match nothing."""
    if step.source == "launch":
        return None
    best: dict[str, Any] | None = None
    for r in rows:
        if key_matches(r["step_key"], step.name):
            if best is None or len(r["step_key"].split()) > len(best["step_key"].split()):
                best = r
    return best


def _shape_from_kernel(k: Kernel, thr: KernelThreshold | None) -> tuple[int | None, int | None]:
    """(qo_heads, kv_heads) the launch shows: CUDA-core block.y = G and grid.y = H_kv; FA2 grid.z = H_kv."""
    kv = thr.kv_heads if thr else None
    if k.backend == CUDA_CORE and kv and k.block[1]:
        return k.block[1] * kv, kv
    return None, kv


def batch_from_sidecar(row: dict[str, Any], launch: Launch, thr: KernelThreshold | None) -> StepBatch:
    q_k, kv_k = _shape_from_kernel(launch.attention, thr)
    kv_lens = tuple(int(x) for x in row["kv_lens"]) if row.get("kv_lens") is not None else None
    b = row.get("batch_size") or (len(kv_lens) if kv_lens else None)
    known = [f"batch composition from the sidecar (key {row['step_key']!r})"]
    call = {k: row[f"call_{k}"] for k in CALL_FIELDS if row.get(f"call_{k}") is not None}
    if kv_lens is None:
        known.append("the sidecar gives the batch size but not the KV lengths")
    return StepBatch(
        source="sidecar",
        step_key=row["step_key"],
        batch_size=b,
        batch_size_min=b,
        batch_size_max=b,
        kv_lens=kv_lens,
        qo_heads=row.get("qo_heads") or q_k,
        kv_heads=row.get("kv_heads") or kv_k,
        head_dim=row.get("head_dim") or launch.attention.params.get("head_dim"),
        page_size=row.get("page_size"),
        kv_dtype=row.get("kv_dtype"),
        backend=row.get("backend"),
        cuda_graph=row.get("cuda_graph"),
        planned_split_kv=row.get("planned_split_kv"),
        planned_padded_batch=row.get("planned_padded_batch"),
        known=tuple(known),
        call=call or None,
        planned_splits=tuple(int(x) for x in row["planned_splits"]) if row.get("planned_splits") else None,
        planned_num_splits=row.get("planned_num_splits"),
    )


def batch_from_trace(launch: Launch, thr: KernelThreshold | None, cuda_graph: bool, gpu: GPU,
                     merge_occ: int | None) -> StepBatch:
    """Bounds on the batch from the launch alone (KERNELS.md §6)."""
    k = launch.attention
    q_k, kv_k = _shape_from_kernel(k, thr)
    lo: int | None = None
    hi: int | None = None
    exact: int | None = None
    known: list[str] = []
    split = launch.split_kv
    if k.backend == CUDA_CORE and not cuda_graph:
        if split is False:
            exact = k.grid[0]
            known.append(f"split-KV off (no merge kernel), so grid.x = {k.grid[0]} = B exactly")
        elif split is True:
            hi = k.grid[0] - 1
            lo = 1
            known.append(f"split-KV on (merge kernel follows): grid.x = {k.grid[0]} counts work items, so "
                         f"B <= {hi}")
            m = _merge_bound(launch, q_k, gpu, merge_occ)
            if m:
                lo, hi2, why = m
                hi = min(hi, hi2)
                known.append(why)
    elif k.backend == CUDA_CORE and cuda_graph:
        if split is False:
            exact = k.grid[0]
            known.append(f"CUDA graph without split: grid.x = {k.grid[0]} = B")
        else:
            known.append("CUDA graph with split: grid.x is padded to max_grid / H_kv and says nothing about B")
    elif k.backend == FA2:
        if split is False and not cuda_graph:
            exact = k.grid[0]
            known.append(f"split-KV off, one query tile per request (G <= 16): grid.x = {k.grid[0]} = B")
        elif split is True and not cuda_graph:
            hi = max(k.grid[0] - 1, 1)
            lo = 1
            known.append(f"split-KV on: grid.x = {k.grid[0]} work items, so B <= {hi}")
    else:
        known.append(f"the {k.backend or 'unknown'} backend's grid {tuple(k.grid)} does not reveal the batch size")
    if thr and thr.b_threshold and split is True and (hi is None or hi >= thr.b_threshold):
        hi = thr.b_threshold - 1
        lo = lo or 1
        known.append(f"split-KV was on, so B < B_th = {thr.b_threshold}")
    if exact is not None:
        lo = hi = exact
    known.append("KV lengths unknown without a sidecar; the launch's duration is the only hint of the longest "
                 "request")
    return StepBatch(
        source="trace", step_key=None, batch_size=exact, batch_size_min=lo, batch_size_max=hi, kv_lens=None,
        qo_heads=q_k, kv_heads=kv_k, head_dim=k.params.get("head_dim"), cuda_graph=cuda_graph,
        planned_split_kv=split, known=tuple(known),
    )


def _merge_bound(launch: Launch, qo_heads: int | None, gpu: GPU, merge_occ: int | None
                 ) -> tuple[int, int, str] | None:
    """B from FlashInfer's merge grid num_SM * min(occ_merge, ceil(B * H_q / num_SM)) when below the cap."""
    if not launch.merges or not qo_heads or not merge_occ:
        return None
    gx = launch.merges[0].grid[0]
    if gx % gpu.num_sms:
        return None
    m = gx // gpu.num_sms
    if m >= merge_occ:
        return None
    lo = ((m - 1) * gpu.num_sms) // qo_heads + 1
    hi = (m * gpu.num_sms) // qo_heads
    return lo, hi, (f"merge grid {gx} = {m} x {gpu.num_sms} SMs (below its occupancy {merge_occ}) means "
                    f"B x {qo_heads} query heads is in ({(m - 1) * gpu.num_sms}, {m * gpu.num_sms}]: "
                    f"{lo} <= B <= {hi}")


def planner_batch(sb: StepBatch) -> Batch | None:
    """The planner's Batch for a sidecar batch with KV lengths and a full shape; None otherwise. FA3 needs no
    page size (its unit is the kBlockN KV block): a batch without one is read at token granularity."""
    page = sb.page_size or (1 if sb.backend == FA3 else None)
    if sb.kv_lens is None or not sb.kv_lens or not sb.qo_heads or not sb.kv_heads or not page:
        return None
    if sb.qo_heads % sb.kv_heads:
        return None
    return Batch(kv_lens=sb.kv_lens, page_size=page, qo_heads=sb.qo_heads, kv_heads=sb.kv_heads,
                 head_dim=sb.head_dim or 128, kv_dtype_bytes=_dtype_bytes(sb.kv_dtype))


def fa3_options(k: Kernel, sb: StepBatch | None) -> dict[str, Any]:
    """FA3Options for a launch: kBlockM / kBlockN from the kernel's template, and what the call asked for
    (forced num_splits, sm_margin, causal, pack_gqa, max_seqlen_k) when a sidecar recorded it."""
    out: dict[str, Any] = {}
    for key, name in (("block_m", "kBlockM"), ("block_n", "kBlockN")):
        v = k.params.get(name)
        if isinstance(v, int) and v > 0:
            out[key] = v
    call = (sb.call if sb is not None else None) or {}
    for key in ("num_splits", "sm_margin", "max_seqlen_k"):
        if isinstance(call.get(key), int):
            out[key] = call[key]
    for key in ("causal", "pack_gqa"):
        if isinstance(call.get(key), bool):
            out[key] = call[key]
    return out


# ---------------------------------------------------------------------------------------------- calibration
def _item_stats(p: Plan) -> tuple[int, float]:
    toks = [it.kv_tokens for it in p.work_items]
    return (max(toks), statistics.fmean(toks)) if toks else (0, 0.0)


def is_balanced(p: Plan) -> bool:
    """Every work item within BALANCED_MAX_ITEM_RATIO of the mean (KV tokens)."""
    longest, mean = _item_stats(p)
    return mean > 0 and longest <= BALANCED_MAX_ITEM_RATIO * mean


def imbalance(p: Plan) -> float:
    """Longest work item over the mean work item (KV tokens); inf for an empty plan."""
    longest, mean = _item_stats(p)
    return longest / mean if mean > 0 else math.inf


def _spread(pairs: list[tuple[Plan, float]], n: int) -> list[tuple[Plan, float]]:
    """At most n of `pairs`, spread evenly over the range of total KV work."""
    pairs = sorted(pairs, key=lambda pn: sum(it.kv_tokens for it in pn[0].work_items))
    if len(pairs) <= n:
        return pairs
    step = (len(pairs) - 1) / (n - 1)
    return [pairs[round(i * step)] for i in range(n)]


def calibration_samples(pairs: list[tuple[Plan, list[int]]]) -> tuple[list[tuple[Plan, float]], bool]:
    """The (plan, median measured ns) pairs one kernel is calibrated on, and whether they are balanced: its
    balanced launches (at most CALIBRATION_MAX_SAMPLES, spread over the range of total KV work); when fewer than
    MIN_CALIBRATION_SAMPLES are balanced (a serving trace, where every batch mixes lengths), its least
    imbalanced launches instead."""
    med = [(p, float(statistics.median(ns))) for p, ns in pairs if ns]
    balanced = [(p, m) for p, m in med if is_balanced(p)]
    if len(balanced) >= MIN_CALIBRATION_SAMPLES:
        return _spread(balanced, CALIBRATION_MAX_SAMPLES), True
    least = sorted(med, key=lambda pm: imbalance(pm[0]))[:CALIBRATION_MAX_SAMPLES]
    return _spread(least, CALIBRATION_MAX_SAMPLES), False


def calibrate_costs(
    samples: dict[str, list[tuple[Plan, list[int]]]], gpu: GPU, occ: dict[str, int]
) -> tuple[dict[str, CostModel], list[str]]:
    """Per kernel name, a cost model fitted on its balanced launches: [(plan, measured attention ns of every
    launch with that plan)]. Only the SM rate and the launch time are fitted (CALIBRATION_FIT); the shape of
    the model (how much faster a lone CTA runs) keeps the backend's prior, which balanced launches cannot
    identify."""
    costs: dict[str, CostModel] = {}
    notes: list[str] = []
    for name, pairs in samples.items():
        chosen, balanced = calibration_samples(pairs)
        if len(chosen) < MIN_CALIBRATION_SAMPLES:
            notes.append(f"{name[:60]}: {len(chosen)} launches with a known batch, need {MIN_CALIBRATION_SAMPLES} "
                         "to calibrate its cost model")
            continue
        if not balanced:
            worst = max(imbalance(p) for p, _ in chosen)
            notes.append(f"{name[:60]}: no balanced launches; calibrated on the {len(chosen)} least imbalanced "
                         f"(longest work item up to {worst:.1f}x the mean), so its speed leans on the model's "
                         "prior for how fast a CTA runs alone")
        try:
            costs[name] = calibrate(chosen, gpu, occ[name], fit=CALIBRATION_FIT)
        except (ValueError, ZeroDivisionError) as exc:
            notes.append(f"{name[:60]}: calibration failed ({exc})")
    return costs, notes


# ---------------------------------------------------------------------------------------------- launches
def cached_plan(cache: dict[Any, Any], backend: str, batch: Batch, gpu: GPU, occ: int, cuda_graph: bool,
                **options: Any) -> Plan:
    """`plan(...)`, memoized in `cache` (a Schedule's cache) by backend, batch, SM count, occupancy, mode and the
    backend's options (FA3: see `fa3_options`)."""
    key = ("plan", backend, batch, gpu.num_sms, occ, cuda_graph, tuple(sorted(options.items())))
    p = cache.get(key)
    if p is None:
        p = cache[key] = plan(backend, batch, gpu, occ, cuda_graph=cuda_graph, **options)
    return p


def cached_sim(cache: dict[Any, Any], p: Plan, gpu: GPU, occ: int, cost: CostModel) -> SimResult:
    """`simulate(...)`, memoized in `cache` by plan (identity: plans come from `cached_plan`), GPU, cost."""
    key = ("sim", id(p), gpu.num_sms, occ, cost)
    r = cache.get(key)
    if r is None:
        r = cache[key] = (p, simulate(p, gpu, occ, cost))  # keep p alive: its id is the key
    return r[1]


def throughput_floor_ns(p: Plan, gpu: GPU, occ: int, cost: CostModel) -> float:
    """The plan's work at full-GPU throughput: launch_ns + sum of (item tokens + per-item overhead) / the rate of
    all SMs each holding `occ` CTAs (persistent plans: one CTA per SM), capped by the HBM rate (ns). What the
    launch would take if its work were spread perfectly evenly."""
    per_sm = 1 if p.persistent else max(occ, 1)
    full = gpu.num_sms * per_sm * cost.per_cta_rate(per_sm)
    if cost.gpu_rate is not None:
        full = min(full, cost.gpu_rate)
    work = sum(it.kv_tokens + cost.item_overhead_tokens for it in p.work_items)
    return cost.launch_ns + work / full if full > 0 else math.inf


def model_from_plan(kernel_id: int, p: Plan, k: Kernel, gpu: GPU, occ: int, cost: CostModel | None,
                    source: str = "sidecar", cache: dict[Any, Any] | None = None) -> LaunchModel:
    longest, mean = _item_stats(p)
    sim = None
    if cost is not None:
        sim = cached_sim(cache, p, gpu, occ, cost) if cache is not None else simulate(p, gpu, occ, cost)
    return LaunchModel(
        kernel_id=kernel_id,
        source=source,
        work_items=sum(1 for it in p.work_items if it.kv_tokens > 0) or len(p.work_items),
        chunk_tokens=p.chunk_tokens,
        split_kv=p.split_kv,
        predicted_ns=round(sim.predicted_ns) if sim else None,
        sm_idle=sim.sm_idle_fraction if sim else None,
        tail_ns=round(sim.tail_ns) if sim else None,
        plan=p,
        sim=sim,
        grid_matches=tuple(p.grid) == tuple(k.grid),
        longest_item_tokens=longest,
        mean_item_tokens=mean,
        note=None if cost is not None else "no calibrated cost model for this kernel: work items only",
        balanced_ns=round(throughput_floor_ns(p, gpu, occ, cost)) if cost is not None else None,
    )


def model_from_trace(launch: Launch, thr: KernelThreshold | None) -> LaunchModel:
    k = launch.attention
    x, y, z = k.grid
    persistent = k.backend in (SM90, FA3)
    return LaunchModel(
        kernel_id=k.kernel_id,
        source="trace",
        work_items=None if persistent else x * max(y, 1) * max(z, 1),
        chunk_tokens=None,
        split_kv=launch.split_kv,
        predicted_ns=None,
        sm_idle=None,
        tail_ns=None,
        note="batch composition unknown (no sidecar): CTAs from the grid, split-KV from the merge kernel",
    )


# ---------------------------------------------------------------------------------------------- idle gaps
def idle_gaps(db: TraceDB, trace_id: int, steps: list[Step], device_id: int | None) -> list[IdleGap]:
    """Stretches with nothing on the GPU that lie between steps (inside no step's span), from the first step to
    the last; each is given to the step that follows it. Vectorised: a long trace has a gap between most of its
    kernels, and only those between steps are kept."""
    if len(steps) < 2:
        return []
    ordered = sorted(steps, key=lambda s: (s.start_ns, s.end_ns))
    params = {"t": trace_id, "d": device_id, "min": IDLE_GAP_RECORD_NS, "lo": ordered[0].start_ns,
              "hi": ordered[-1].end_ns}
    gaps = db.con.sql(sql("gpu_gaps"), params=params).to_arrow_table()
    g0 = gaps.column("gap_start").to_numpy().astype(np.int64)
    g1 = gaps.column("gap_end").to_numpy().astype(np.int64)
    starts = np.array([s.start_ns for s in ordered], np.int64)
    reach = np.maximum.accumulate(np.array([s.end_ns for s in ordered], np.int64))  # latest end of steps 0..i
    after = np.searchsorted(starts, g1, side="left")  # first step starting at or after the gap's end
    # Not before the first step, not after the last one, and not inside a step.
    keep = (after > 0) & (after < len(ordered))
    keep[keep] = reach[after[keep] - 1] <= g0[keep]
    kept = np.flatnonzero(keep)
    before = np.array([s.index for s in ordered], np.int64)[after[kept]]
    return list(map(IdleGap._make, zip(g0[kept].tolist(), g1[kept].tolist(), before.tolist(), strict=True)))


# ---------------------------------------------------------------------------------------------- phases
def _phase_from_sidecar(step: Step, row: dict[str, Any]) -> None:
    """Every attention launch of the step takes the phase the sidecar's query lengths tell (decode, prefill or
    mixed), and tensor-core launches their query-tile padding."""
    qo = [int(q) for q in row["qo_lens"]]
    found = phase_from_query_lengths(qo)
    if found is None:
        return
    group = (row["qo_heads"] // row["kv_heads"]) if row.get("qo_heads") and row.get("kv_heads") else 1
    for launch in step.launches:
        launch.phase, launch.phase_evidence = found
        tile = launch.attention.params.get("cta_tile_q")
        if isinstance(tile, int) and tile > 0:
            launch.tiles = tile_padding(qo, tile, group)


def _fa3_split_state(launch: Launch, sb: StepBatch, p: Plan) -> None:
    """What FA3 did with the batch: split-KV is on when at least one request was cut (a combine kernel alone
    does not say so: it runs whenever the static bound S > 1, even past the 992-request cap where nothing is
    cut). From the sidecar's scheduler metadata when recorded, else from the planner replayed on the batch."""
    combine = "a combine kernel follows" if launch.merges else "no combine kernel follows"
    if sb.planned_splits is not None:
        cut = sum(1 for x in sb.planned_splits if x > 1)
        launch.split_kv = cut > 0
        launch.split_evidence = (f"FA3's scheduler metadata (sidecar): {cut} of {len(sb.planned_splits)} requests "
                                 f"cut, up to {max(sb.planned_splits)} splits; {combine}")
        return
    splits = p.splits or ()
    cut = sum(1 for x in splits if x > 1)
    s_static = p.details.get("num_splits_static")
    why = ("above FA3's dynamic-split cap of 992 requests nothing is cut" if not p.details.get("dynamic_split")
           and (s_static or 1) > 1 else f"static split bound S = {s_static}")
    launch.split_kv = cut > 0
    launch.split_evidence = (f"FA3's planner replayed on the sidecar's batch: {cut} of {len(splits)} requests cut "
                             f"({why}); {combine}")


# ---------------------------------------------------------------------------------------------- main
def _attention_launches(steps: Iterable[Step]) -> Iterable[tuple[Step, Launch]]:
    for s in steps:
        for launch in s.launches:
            yield s, launch


def _device_row(db: TraceDB, trace_id: int, gpu_row: dict[str, Any]) -> dict[str, Any]:
    """The devices row of the GPU the trace's kernels ran on, merged over `gpu_row` (trace_gpu.sql). Kernels on a
    device id that no devices row describes use the trace's only devices row, when it has exactly one (the SGLang
    MI300X trace: kernels on device 9, properties under id 0); the device id stays the kernels'."""
    dev = gpu_row.get("device_id")
    rows = db.rows("SELECT * FROM devices WHERE trace_id = $t AND (device_id = $d OR $d IS NULL) "
                   "ORDER BY device_id LIMIT 1", {"t": trace_id, "d": dev})
    if not rows and dev is not None:
        rows = db.rows("SELECT * FROM devices WHERE trace_id = $t LIMIT 2", {"t": trace_id})
        rows = [{**rows[0], "device_id": dev}] if len(rows) == 1 else []
    return {**gpu_row, **(rows[0] if rows else {})}


def attach(db: TraceDB, trace_id: int, steps: list[Step], gpu_row: dict[str, Any]) -> Schedule:
    """Build the schedule model of one trace (see the module docstring)."""
    from traceinsight.errors import TraceInsightError

    device = _device_row(db, trace_id, gpu_row)
    gaps = idle_gaps(db, trace_id, steps, gpu_row.get("device_id"))
    try:
        gpu = gpu_for(device.get("name"), {k: v for k, v in device.items() if k != "name"})
    except TraceInsightError as exc:
        return Schedule(gpu=None, idle_gaps=gaps, notes=[f"no GPU model: {exc}"])
    sched = Schedule(gpu=gpu, idle_gaps=gaps)
    graph_ids = {r["kernel_id"] for r in db.rows(
        "SELECT kernel_id FROM kernels WHERE trace_id = $t AND graph_node_id IS NOT NULL", {"t": trace_id})}
    sched.cuda_graph_kernels = frozenset(graph_ids)
    rows = sidecar_rows(db, trace_id)
    matched: dict[int, dict[str, Any]] = {}
    for s in steps:
        r = match_sidecar(s, rows)
        if r is not None:
            matched[s.index] = r

    # (a) thresholds, one per attention kernel variant (its most common launch shape).
    by_name: dict[str, list[Kernel]] = defaultdict(list)
    hint: dict[str, int] = {}
    for s, launch in _attention_launches(steps):
        by_name[launch.attention.name].append(launch.attention)
        r = matched.get(s.index)
        if r and r.get("kv_heads"):
            hint[launch.attention.name] = int(r["kv_heads"])
    for name, ks in by_name.items():
        shape = Counter((k.grid, k.block, k.registers_per_thread, k.smem_bytes) for k in ks).most_common(1)[0][0]
        rep = next(k for k in ks if (k.grid, k.block, k.registers_per_thread, k.smem_bytes) == shape)
        thr = kernel_threshold(rep, gpu, hint.get(name))
        if thr is not None:
            sched.thresholds[name] = thr

    # Occupancy of the merge kernels (bounds B from their grid).
    merge_occ: dict[str, int] = {}
    for _, launch in _attention_launches(steps):
        for m in launch.merges:
            if m.name not in merge_occ:
                merge_occ[m.name] = occupancy_limits(gpu, m.registers_per_thread or 0, _threads(m),
                                                     m.smem_bytes or 0).blocks

    # (b) batch composition per step, (c) plans (one per distinct batch), calibration, simulation.
    plans: dict[int, tuple[Plan, int]] = {}
    samples: dict[str, dict[int, tuple[Plan, list[int]]]] = defaultdict(dict)
    for s in steps:
        if not s.launches:
            continue
        first = s.launches[0]
        thr = sched.thresholds.get(first.attention.name)
        cuda_graph = first.attention.kernel_id in graph_ids
        r = matched.get(s.index)
        if r is not None and r.get("qo_lens"):
            _phase_from_sidecar(s, r)
        if r is not None:
            sb = batch_from_sidecar(r, first, thr)
            if sb.cuda_graph is not None:
                cuda_graph = sb.cuda_graph
        else:
            mo = merge_occ.get(first.merges[0].name) if first.merges else None
            sb = batch_from_trace(first, thr, cuda_graph, gpu, mo)
        sched.batches[s.index] = sb
        pb = planner_batch(sb) if sb.source == "sidecar" else None
        for launch in s.launches:
            k = launch.attention
            t = sched.thresholds.get(k.name)
            if pb is None or t is None or k.backend not in BACKENDS or launch.phase in PREFILL_PHASES:
                continue
            occ = t.occupancy if k.backend in (CUDA_CORE, FA2) else 1
            opts = fa3_options(k, sb) if k.backend == FA3 else {}
            try:
                p = cached_plan(sched.cache, k.backend, pb, gpu, occ, cuda_graph, **opts)
            except ValueError as exc:
                sched.notes.append(f"step {s.index}: planner failed ({exc})")
                continue
            plans[k.kernel_id] = (p, occ)
            samples[k.name].setdefault(id(p), (p, []))[1].append(k.dur_ns)
            if k.backend == FA3:
                _fa3_split_state(launch, sb, p)

    occ_by_name = {name: (t.occupancy if t.backend in (CUDA_CORE, FA2) else 1)
                   for name, t in sched.thresholds.items()}
    sched.costs, notes = calibrate_costs({n: list(v.values()) for n, v in samples.items()}, gpu, occ_by_name)
    sched.notes.extend(notes)
    model_cache: dict[tuple[int, str], LaunchModel] = {}
    for _, launch in _attention_launches(steps):
        k = launch.attention
        if k.kernel_id in plans:
            p, occ = plans[k.kernel_id]
            model = model_cache.get((id(p), k.name))
            if model is None:
                model = model_cache[(id(p), k.name)] = model_from_plan(k.kernel_id, p, k, gpu, occ,
                                                                       sched.costs.get(k.name), cache=sched.cache)
            sched.models[k.kernel_id] = replace(model, kernel_id=k.kernel_id, grid_matches=tuple(p.grid) == k.grid)
        elif k.backend in BACKENDS and launch.phase not in PREFILL_PHASES:
            sched.models[k.kernel_id] = model_from_trace(launch, sched.thresholds.get(k.name))

    # (d) Nsight Compute measurements matched to launches.
    try:
        from traceinsight.ingest.ncu_csv import sm_active

        for r in sm_active(db, trace_id):
            if r["kernel_id"] is not None and r["sm_active_max"] is not None:
                sched.measured[int(r["kernel_id"])] = Measured(int(r["ncu_id"]), r["sm_active_min"],
                                                               r["sm_active_avg"], r["sm_active_max"])
    except ImportError:  # pragma: no cover - the ncu reader ships with the package
        pass

    return sched
