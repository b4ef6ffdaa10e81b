"""Counterfactuals: replay one step's batch through the alternatives and predict each one's time (ns).

- as-run: the launch's own backend and mode, re-planned and simulated (check against the measured time);
- split-kv-kept-on: the same backend, its planner's CTA budget raised so that long requests are still cut
  (max_grid + B * H_kv CTAs: one more full wave's worth of chunks), merge kernel cost not included;
- fa3-dynamic-split: FlashAttention-3's persistent scheduler with per-request dynamic splits;
- the other decode paths: FlashInfer CUDA-core, FA2 tensor-core, SM90 tensor-core;
- batch-capped: at most B_th - 1 requests per step (the rest in further steps), so the planner keeps
  splitting; predicted_ns is the slowest of those steps, total_ns their sum (FA3: at most 992, its cap);
- fa3-heuristic-split (an FA3 launch that forced num_splits): the same call with num_splits = 0.

Cost models: the backend's model calibrated on this trace when it has one; else the model's uncalibrated
default (`traceinsight.model.default_cost`, measured on an H200, scaled by bandwidth), and the alternative says
so in `assumption`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from traceinsight.model import default_cost
from traceinsight.model.batches import fa3_options, planner_batch
from traceinsight.model.gpus import GPU
from traceinsight.model.launch_models import cached_plan, cached_sim
from traceinsight.model.occupancy import (
    BACKENDS,
    CUDA_CORE,
    FA2,
    FA2_CTAS_PER_SM,
    FA3,
    FA3_MAX_DYNAMIC_SPLIT_BATCH,
    SM90,
    occupancy,
    threshold,
)
from traceinsight.model.phases import PREFILL_PHASES
from traceinsight.model.planners import Batch, Plan, plan
from traceinsight.model.planners.types import ceil_div
from traceinsight.model.schedule import Schedule, StepBatch
from traceinsight.model.simulate import CostModel
from traceinsight.model.steps import Launch

# Registers per thread assumed for FlashInfer's CUDA-core decode kernel when the trace has none of its launches
# (the bf16, head_dim 128 build measured on H200: 56 registers).
CUDA_CORE_ASSUMED_REGISTERS = 56
# Bytes per thread vector load of the CUDA-core kernel (vec_size * element bytes = 16).
CUDA_CORE_VECTOR_BYTES = 16
# Resident CTAs per SM assumed for the FA2 tensor-core kernel when the trace has none (its planner's target).
FA2_ASSUMED_OCCUPANCY = FA2_CTAS_PER_SM

PATHS: dict[str, str] = {
    CUDA_CORE: "FlashInfer CUDA-core decode",
    FA2: "FlashInfer tensor-core decode, FA2 backend",
    SM90: "FlashInfer tensor-core decode, SM90 backend",
    FA3: "FlashAttention-3 (dynamic split)",
}


@dataclass(frozen=True)
class Alternative:
    """One replay of a step's batch (ns). steps: how many steps serve the batch (1 unless capped)."""

    name: str
    description: str
    backend: str
    predicted_ns: int | None
    total_ns: int | None
    split_kv: bool | None
    work_items: int | None
    chunk_tokens: int | None
    sm_idle: float | None
    steps: int = 1
    assumption: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "description": self.description, "backend": self.backend,
            "predicted_ns": self.predicted_ns, "total_ns": self.total_ns, "split_kv": self.split_kv,
            "work_items": self.work_items, "chunk_tokens": self.chunk_tokens,
            "sm_idle": round(self.sm_idle, 4) if self.sm_idle is not None else None, "steps": self.steps,
            "assumption": self.assumption,
        }


def cost_for(sched: Schedule, backend: str) -> tuple[CostModel, str | None]:
    """The cost model for `backend`: calibrated on this trace if a kernel of it was, else the default (with
    the assumption said)."""
    assert sched.gpu is not None
    for name, cost in sched.costs.items():
        t = sched.thresholds.get(name)
        if t is not None and t.backend == backend:
            return cost, None
    return default_cost(backend, sched.gpu), (
        f"{backend} has no calibrated launch in this trace: its default cost model (H200-measured, scaled by "
        "HBM bandwidth) is used")


def occupancy_for(sched: Schedule, backend: str, batch: Batch) -> tuple[int, str | None]:
    """Resident CTAs per SM of `backend`'s kernel: from this trace when it ran, else an assumption."""
    assert sched.gpu is not None
    for t in sched.thresholds.values():
        if t.backend == backend and t.occupancy > 0:
            return (t.occupancy if backend in (CUDA_CORE, FA2) else 1), None
    if backend == CUDA_CORE:
        threads = (batch.head_dim * batch.kv_dtype_bytes // CUDA_CORE_VECTOR_BYTES) * batch.group_size
        occ = occupancy(sched.gpu, CUDA_CORE_ASSUMED_REGISTERS, max(threads, 32), 0)
        return max(occ, 1), (f"CUDA-core kernel not in this trace: occupancy {occ} assumed from "
                             f"{CUDA_CORE_ASSUMED_REGISTERS} registers x {threads} threads")
    if backend == FA2:
        return FA2_ASSUMED_OCCUPANCY, f"FA2 kernel not in this trace: {FA2_ASSUMED_OCCUPANCY} CTAs per SM assumed"
    return 1, None


def _run(sched: Schedule, name: str, description: str, backend: str, p: Plan, gpu: GPU, occ: int, cost: CostModel,
         assumption: str | None) -> Alternative:
    sim = cached_sim(sched.cache, p, gpu, occ, cost)
    return Alternative(name, description, backend, round(sim.predicted_ns), round(sim.predicted_ns), p.split_kv,
                       sum(1 for it in p.work_items if it.kv_tokens > 0) or len(p.work_items), p.chunk_tokens,
                       sim.sm_idle_fraction, 1, assumption)


def _join(*parts: str | None) -> str | None:
    text = "; ".join(p for p in parts if p)
    return text or None


def split_kept_on_plan(backend: str, batch: Batch, gpu: GPU, occ: int, cuda_graph: bool,
                       cache: dict[Any, Any] | None = None) -> Plan:
    """The backend's own chunk search with a CTA budget of max_grid + B * H_kv, so that the long requests are
    still cut above the threshold. Simulate the result on the real `gpu`."""
    extra = batch.batch_size * batch.kv_heads
    bigger = gpu
    if backend == CUDA_CORE:
        bigger = replace(gpu, num_sms=gpu.num_sms + ceil_div(extra, max(occ, 1)))
    elif backend == FA2:
        bigger = replace(gpu, num_sms=gpu.num_sms + ceil_div(extra, FA2_CTAS_PER_SM))
    if cache is not None:
        return cached_plan(cache, backend, batch, bigger, occ, cuda_graph)
    return plan(backend, batch, bigger, occ, cuda_graph=cuda_graph)


def split_kept_on(sched: Schedule, launch: Launch, sb: StepBatch, cuda_graph: bool = False) -> Alternative | None:
    """Predicted time of the launch with split-KV kept on (None without a batch, GPU or known backend).
    Memoized per (backend, batch, mode) in `sched.cache`."""
    batch = planner_batch(sb)
    backend = launch.attention.backend or ""
    if batch is None or sched.gpu is None or backend not in (CUDA_CORE, FA2):
        return None
    key = ("split-kv-kept-on", backend, batch, cuda_graph)
    if key not in sched.cache:
        sched.cache[key] = _split_kept_on(sched, backend, batch, cuda_graph)
    return sched.cache[key]  # type: ignore[no-any-return]


def path_alternative(sched: Schedule, backend: str, sb: StepBatch) -> Alternative | None:
    """Predicted time of the step's batch on another decode path `backend` (eager), memoized."""
    batch = planner_batch(sb)
    if batch is None or sched.gpu is None or backend not in BACKENDS:
        return None
    key = ("path", backend, batch)
    if key not in sched.cache:
        occ, occ_note = occupancy_for(sched, backend, batch)
        cost, cost_note = cost_for(sched, backend)
        p = cached_plan(sched.cache, backend, batch, sched.gpu, occ, False)
        name = "fa3-dynamic-split" if backend == FA3 else backend
        sched.cache[key] = _run(sched, name, PATHS[backend], backend, p, sched.gpu, occ, cost,
                                _join(occ_note, cost_note))
    return sched.cache[key]  # type: ignore[no-any-return]


def _split_kept_on(sched: Schedule, backend: str, batch: Batch, cuda_graph: bool) -> Alternative:
    assert sched.gpu is not None
    occ, occ_note = occupancy_for(sched, backend, batch)
    cost, cost_note = cost_for(sched, backend)
    p = split_kept_on_plan(backend, batch, sched.gpu, occ, cuda_graph, sched.cache)
    return _run(sched, "split-kv-kept-on", f"{PATHS[backend]} with split-KV kept on (budget max_grid + B x H_kv CTAs)",
                backend, p, sched.gpu, occ, cost, _join(occ_note, cost_note,
                                                        "merge kernel time not included"))


def capped(sched: Schedule, backend: str, batch: Batch, cap: int, cuda_graph: bool = False) -> Alternative | None:
    """The batch served in steps of at most `cap` requests (in request order)."""
    if sched.gpu is None or cap <= 0:
        return None
    occ, occ_note = occupancy_for(sched, backend, batch)
    cost, cost_note = cost_for(sched, backend)
    times = []
    idle = []
    items = 0
    for i in range(0, batch.batch_size, cap):
        part = replace(batch, kv_lens=batch.kv_lens[i:i + cap], qo_lens=None)
        p = cached_plan(sched.cache, backend, part, sched.gpu, occ, cuda_graph)
        sim = cached_sim(sched.cache, p, sched.gpu, occ, cost)
        times.append(sim.predicted_ns)
        idle.append(sim.sm_idle_fraction)
        items += len(p.work_items)
    n = len(times)
    worst = max(range(n), key=lambda j: times[j])
    return Alternative("batch-capped", f"{PATHS.get(backend, backend)} with at most {cap} requests per step "
                       f"({n} step{'s' if n > 1 else ''})", backend, round(times[worst]), round(sum(times)),
                       None, items, None, idle[worst], n, _join(occ_note, cost_note))


def alternatives(sched: Schedule, launch: Launch, sb: StepBatch, cuda_graph: bool = False) -> list[Alternative]:
    """Every alternative for one launch whose step's batch composition is known (empty otherwise)."""
    batch = planner_batch(sb)
    gpu = sched.gpu
    backend = launch.attention.backend or ""
    if batch is None or gpu is None or backend not in BACKENDS:
        return []
    out: list[Alternative] = []
    occ, occ_note = occupancy_for(sched, backend, batch)
    cost, cost_note = cost_for(sched, backend)
    opts = fa3_options(launch.attention, sb) if backend == FA3 else {}
    p = cached_plan(sched.cache, backend, batch, gpu, occ, cuda_graph, **opts)
    out.append(_run(sched, "as-run", f"{PATHS[backend]} as run", backend, p, gpu, occ, cost,
                    _join(occ_note, cost_note)))
    kept = split_kept_on(sched, launch, sb, cuda_graph)
    if kept is not None:
        out.append(kept)
    if backend == FA3:
        out.extend(_fa3_alternatives(sched, batch, opts, occ, cost, _join(occ_note, cost_note)))
    for alt in (FA3, CUDA_CORE, FA2, SM90):
        if alt != backend:
            a = path_alternative(sched, alt, sb)
            if a is not None:
                out.append(a)
    if backend in (CUDA_CORE, FA2):
        thr = threshold(backend, occ, gpu.num_sms, batch.kv_heads)
        if thr.b_threshold and batch.batch_size >= thr.b_threshold:
            c = capped(sched, backend, batch, thr.b_threshold - 1, cuda_graph)
            if c is not None:
                out.append(c)
    return out


def _fa3_alternatives(sched: Schedule, batch: Batch, opts: dict[str, Any], occ: int, cost: CostModel,
                      note: str | None) -> list[Alternative]:
    """FA3's own levers: its heuristic split instead of a forced num_splits, and the batch served in steps of at
    most 992 requests (its dynamic-split cap) when it was above it."""
    gpu = sched.gpu
    assert gpu is not None
    out = []
    if opts.get("num_splits"):
        free = {**opts, "num_splits": 0}
        p = cached_plan(sched.cache, FA3, batch, gpu, occ, False, **free)
        out.append(_run(sched, "fa3-heuristic-split", f"{PATHS[FA3]} with num_splits = 0 (its heuristic) instead of "
                        f"{opts['num_splits']}", FA3, p, gpu, occ, cost, note))
    if batch.batch_size > FA3_MAX_DYNAMIC_SPLIT_BATCH:
        times, idle, items = [], [], 0
        for i in range(0, batch.batch_size, FA3_MAX_DYNAMIC_SPLIT_BATCH):
            part = replace(batch, kv_lens=batch.kv_lens[i:i + FA3_MAX_DYNAMIC_SPLIT_BATCH], qo_lens=None)
            p = cached_plan(sched.cache, FA3, part, gpu, occ, False, **opts)
            sim = cached_sim(sched.cache, p, gpu, occ, cost)
            times.append(sim.predicted_ns)
            idle.append(sim.sm_idle_fraction)
            items += len(p.work_items)
        worst = max(range(len(times)), key=lambda j: times[j])
        out.append(Alternative("batch-capped", f"{PATHS[FA3]} with at most {FA3_MAX_DYNAMIC_SPLIT_BATCH} requests per "
                               f"step, its dynamic-split cap ({len(times)} steps)", FA3, round(times[worst]),
                               round(sum(times)), None, items, None, idle[worst], len(times), note))
    return out


@dataclass(frozen=True)
class StepReplay:
    """The alternatives for one step (its first attention launch), with what was measured (ns)."""

    step: int
    name: str
    kernel: str
    backend: str | None
    batch_size: int | None
    total_kv_tokens: int | None
    max_kv_len: int | None
    measured_ns: int
    b_threshold: int | None
    alternatives: tuple[Alternative, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step, "name": self.name, "kernel": self.kernel, "backend": self.backend,
            "batch_size": self.batch_size, "total_kv_tokens": self.total_kv_tokens, "max_kv_len": self.max_kv_len,
            "measured_ns": self.measured_ns, "b_threshold": self.b_threshold,
            "alternatives": [a.to_json() for a in self.alternatives],
        }


def replayable_steps(sched: Schedule | None, steps: list[Any]) -> list[int]:
    """Indexes of the decode steps whose batch composition is known (KV lengths from a sidecar); prefill and
    mixed steps are not replayed (the decode planners do not model them)."""
    if sched is None:
        return []
    return [s.index for s in steps if s.launches and s.phase not in PREFILL_PHASES
            and (b := sched.batches.get(s.index)) is not None and planner_batch(b) is not None]


def replay_step(sched: Schedule, step: Any) -> StepReplay:
    """Replay step `step` (a model.steps.Step whose batch is known) through every alternative."""
    launch = step.launches[0]
    sb = sched.batches[step.index]
    thr = sched.thresholds.get(launch.attention.name)
    cg = launch.attention.kernel_id in sched.cuda_graph_kernels if sb.cuda_graph is None else bool(sb.cuda_graph)
    return StepReplay(
        step=step.index, name=step.name, kernel=launch.attention.kernel, backend=launch.attention.backend,
        batch_size=sb.batch_size, total_kv_tokens=sb.total_kv_tokens, max_kv_len=sb.max_kv_len,
        measured_ns=launch.attention.dur_ns, b_threshold=thr.b_threshold if thr else None,
        alternatives=tuple(alternatives(sched, launch, sb, cg)),
    )


def alternative_cost_ns(alt: Alternative) -> int | None:
    """What serving the step's batch costs with `alt` (ns): its total over the steps it takes (a capped batch
    takes more than one), else its predicted time."""
    return alt.total_ns if alt.total_ns is not None else alt.predicted_ns


def alternative_saving_ns(replay: StepReplay, alt: Alternative) -> int | None:
    """Time `alt` saves against the measured launch (ns; negative when it costs more); None when not predicted."""
    cost = alternative_cost_ns(alt)
    return None if cost is None else replay.measured_ns - cost


def totals(replays: list[StepReplay]) -> list[dict[str, Any]]:
    """Per alternative (by name, in the order they first appear) over the replayed steps: how many steps it was
    predicted for, their measured time, its cost, the saving (measured - cost, ns; negative: it costs more),
    and in how many steps it saves the most of all alternatives (the replay as run, `as-run`, is never the
    best: its row measures the model against the trace). The steps an alternative could not be
    predicted for are left out of its row (its `steps` says how many remain)."""
    rows: dict[str, dict[str, Any]] = {}
    for r in replays:
        best = None
        for alt in r.alternatives:
            saving = alternative_saving_ns(r, alt)
            row = rows.setdefault(alt.name, {"name": alt.name, "description": alt.description, "steps": 0,
                                             "measured_ns": 0, "cost_ns": 0, "saving_ns": 0, "best_in": 0})
            if saving is None:
                continue
            row["steps"] += 1
            row["measured_ns"] += r.measured_ns
            row["cost_ns"] += r.measured_ns - saving
            row["saving_ns"] += saving
            if alt.name != "as-run" and (best is None or saving > best[0]):
                best = (saving, alt.name)
        if best is not None and best[0] > 0:
            rows[best[1]]["best_in"] += 1
    return list(rows.values())
