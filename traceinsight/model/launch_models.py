"""Per launch: the planner's plan, memoized per trace, its calibrated cost model and simulated schedule
(`LaunchModel`); or, without a batch composition, what the trace alone says. Launches with equal inputs share one
model, built once (`launch_models`)."""

from __future__ import annotations

import math
import statistics
from typing import Any, cast

import numpy as np

from traceinsight.model.calibration import calibrate
from traceinsight.model.gpus import GPU
from traceinsight.model.kernel_columns import kernel_ids
from traceinsight.model.occupancy import BACKENDS, FA3, SM90
from traceinsight.model.phases import PREFILL_PHASES
from traceinsight.model.planners import Batch, Plan, plan
from traceinsight.model.schedule import LaunchModel, LaunchModels
from traceinsight.model.simulate import CostModel, SimResult, simulate
from traceinsight.model.steps import Kernel, Launch, Step

# A launch is "balanced" (used to calibrate the cost model) when its longest work item is at most this many
# times its mean work item (KV tokens).
BALANCED_MAX_ITEM_RATIO = 1.5

# Balanced launches needed to calibrate a kernel's cost model, and the most used (spread over the work range).
MIN_CALIBRATION_SAMPLES = 2

CALIBRATION_MAX_SAMPLES = 16

# Cost-model shape parameters fitted on the trace besides speed and launch time (none: keep the prior shape).
CALIBRATION_FIT: tuple[str, ...] = ()


def _item_stats(p: Plan) -> tuple[int, float]:
    """(longest, mean) work item in KV tokens, computed once per plan (calibration and the launch model ask for it
    up to three times per plan)."""
    stats: tuple[int, float] | None = p.__dict__.get("_item_stats")
    if stats is None:
        toks = p.item_kv_tokens
        stats = (max(toks), statistics.fmean(toks)) if toks else (0, 0.0)
        object.__setattr__(p, "_item_stats", stats)
    return stats


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
    pairs = sorted(pairs, key=lambda pn: sum(pn[0].item_kv_tokens))
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
    """`simulate(...)`, memoized in `cache` by the plan's value (a frozen dataclass: equal plans share a
    simulation, and no key outlives or outguesses the object it names), SM count, occupancy and cost model. A plan
    hashes once (Plan.__hash__ keeps it) and its work items are named tuples, hashed at C speed."""
    key = ("sim", p, gpu.num_sms, occ, cost)
    r = cache.get(key)
    if r is None:
        r = cache[key] = simulate(p, gpu, occ, cost)
    return cast(SimResult, r)


def throughput_floor_ns(p: Plan, gpu: GPU, occ: int, cost: CostModel) -> float:
    """The plan's work at full-GPU throughput: launch_ns + sum of (item tokens + per-item overhead) / the rate of
    all SMs each holding `occ` CTAs (persistent plans: one CTA per SM), capped by the HBM rate (ns). What the
    launch would take if its work were spread perfectly evenly."""
    per_sm = 1 if p.persistent else max(occ, 1)
    full = gpu.num_sms * per_sm * cost.per_cta_rate(per_sm)
    if cost.gpu_rate is not None:
        full = min(full, cost.gpu_rate)
    overhead = cost.item_overhead_tokens
    work = sum([k + overhead for k in p.item_kv_tokens])
    return cost.launch_ns + work / full if full > 0 else math.inf


def model_from_plan(p: Plan, k: Kernel, gpu: GPU, occ: int, cost: CostModel | None, source: str = "sidecar",
                    cache: dict[Any, Any] | None = None) -> LaunchModel:
    longest, mean = _item_stats(p)
    sim = None
    if cost is not None:
        sim = cached_sim(cache, p, gpu, occ, cost) if cache is not None else simulate(p, gpu, occ, cost)
    return LaunchModel(
        source=source,
        work_items=sum(1 for k in p.item_kv_tokens if k > 0) or len(p.work_items),
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


# What a launch modelled from the trace alone says of itself (`model_from_trace`).
TRACE_MODEL_NOTE = "batch composition unknown (no sidecar): CTAs from the grid, split-KV from the merge kernel"


def model_from_trace(launch: Launch) -> LaunchModel:
    k = launch.attention
    x, y, z = k.grid
    persistent = k.backend in (SM90, FA3)
    return LaunchModel(
        source="trace",
        work_items=None if persistent else x * max(y, 1) * max(z, 1),
        chunk_tokens=None,
        split_kv=launch.split_kv,
        predicted_ns=None,
        sm_idle=None,
        tail_ns=None,
        note=TRACE_MODEL_NOTE,
    )


def launch_models(steps: list[Step], plans: dict[int, tuple[Plan, int]], gpu: GPU, costs: dict[str, CostModel],
                  cache: dict[Any, Any]) -> LaunchModels:
    """Every modelled attention launch's model by kernel id, in step order: planned launches (`plans`: plan and
    occupancy by kernel id) from their plan and cost model, the other decode launches of a known backend from the
    trace alone. One model per distinct input, shared by the launches that have it (what a model reads: the plan,
    kernel name and traced grid; or grid, backend and split state), so a long trace builds a handful of models
    and simulates each distinct plan once, not one model per launch."""
    planned_kinds: dict[tuple[int, str, tuple[int, ...]], LaunchModel] = {}
    trace_kinds: dict[tuple[Any, ...], LaunchModel] = {}
    modelled: list[Kernel] = []
    kinds: dict[int, int] = {}  # id of a distinct model -> its number
    models: list[LaunchModel] = []  # the distinct models
    codes: list[int] = []
    for s in steps:
        for launch in s.launches:
            k = launch.attention
            got = plans.get(k.kernel_id) if plans else None
            if got is not None:
                p, occ = got
                pkey = (id(p), k.name, k.grid)  # `plans` keeps each plan alive: its id names it here
                m = planned_kinds.get(pkey)
                if m is None:
                    m = planned_kinds[pkey] = model_from_plan(p, k, gpu, occ, costs.get(k.name), cache=cache)
            elif k.backend in BACKENDS and launch.phase not in PREFILL_PHASES:
                tkey = (k.grid, k.backend, launch.split_kv)
                m = trace_kinds.get(tkey)
                if m is None:
                    m = trace_kinds[tkey] = model_from_trace(launch)
            else:
                continue
            modelled.append(k)
            code = kinds.get(id(m))
            if code is None:
                code = kinds[id(m)] = len(models)
                models.append(m)
            codes.append(code)
    # The ids from the kernels' rows, no int object per launch.
    return LaunchModels(kernel_ids(modelled), np.array(codes, np.int32), models)
