"""CTA -> SM simulation of one attention launch: predicted time, per-SM busy time, idle fraction, the tail.

Dispatch:
- non-persistent grids (FlashInfer CUDA-core, FA2): CTAs in linear order x + gx * (y + gy * z); the first
  num_SM * occ go round-robin (CTA k to SM k mod num_SM), every later CTA takes the slot freed first
  (greedy list scheduling). CTAs that free slots at the same instant hand them over in dispatch order.
- persistent grids: one worker per CTA of the grid (worker w on SM w mod num_SM); FlashInfer SM90 workers run
  the items the planner assigned them (WorkItem.worker) in order; FA3 workers pull the next item of the
  global (longest-first) order when they finish one.

Cost (processor sharing): an item is `kv_tokens + item_overhead_tokens` units of work (KV tokens of one KV
head). The CTAs resident on an SM share it equally; with n resident each progresses at 1 / tau(n),
tau(n) = ((1 / cta_rate)^p + (n / sm_rate)^p)^(1/p) (p = sharpness; p = inf: min(cta_rate, sm_rate / n)),
so a lone CTA is latency-bound at cta_rate while a full SM delivers sm_rate in total. When the demand of all
SMs exceeds gpu_rate (HBM), every rate is scaled down by the same factor. Event-driven and exact for this
fluid model; rates are in tokens per ns.

Three implementations give bit-identical results (tests/test_model_fast_paths.py), each in its own module of
traceinsight.model.simulator: the general event loop (shared_loop.run_shared); the same loop with one slot per SM
(single_loop.run_single: FA3, occupancy 1); and, for static persistent plans with one worker per SM (FlashInfer
SM90), a numpy computation of the same arithmetic (static_bulk.run_static), which hands over to the loop in the rare
cases where it cannot be sure to match it. What they share (segments, the run they hand back, the tail) is in
simulator.core, the plan's layout on the SMs in simulator.layout. Plans and simulations pause the cyclic garbage
collector while they build their objects (planners.types.gc_paused).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from traceinsight.model.gpus import GPU
from traceinsight.model.planners.types import Plan, WorkItem, gc_paused
from traceinsight.model.simulator.core import END_NS, START_NS, TAIL_ITEM_SHARE, Segment
from traceinsight.model.simulator.layout import layout
from traceinsight.model.simulator.shared_loop import run_shared
from traceinsight.model.simulator.single_loop import run_single
from traceinsight.model.simulator.static_bulk import run_static

__all__ = ["CostModel", "Segment", "SimResult", "simulate"]


@dataclass(frozen=True)
class CostModel:
    """Per-kernel speed constants (tokens = KV tokens of one KV head; rates in tokens per ns).

    cta_rate: one CTA alone on an SM; sm_rate: an SM shared by many CTAs, in total; gpu_rate: all SMs
    together (HBM-bound), None for no cap; item_overhead_tokens: fixed cost of one work item in
    token-equivalents; launch_ns: added once per launch; sharpness: p of the blend between the per-CTA and the
    per-SM limit (math.inf = a hard min).
    """

    cta_rate: float
    sm_rate: float
    gpu_rate: float | None = None
    item_overhead_tokens: float = 0.0
    launch_ns: float = 0.0
    sharpness: float = math.inf

    def per_cta_rate(self, n: int) -> float:
        """Progress rate of each of `n` CTAs resident on one SM (tokens/ns), before the HBM cap."""
        if n <= 0:
            return 0.0
        a, b = 1.0 / self.cta_rate, n / self.sm_rate
        if math.isinf(self.sharpness):
            return 1.0 / max(a, b)
        p = self.sharpness
        norm: float = (a**p + b**p) ** (1.0 / p)  # real: a, b > 0
        return 1.0 / norm


@dataclass(frozen=True)
class SimResult:
    """Outcome of simulating one launch (ns).

    predicted_ns: makespan + launch_ns; makespan_ns: first dispatch to last completion; sm_busy_ns: per SM,
    time with at least one resident CTA; sm_idle_fraction: 1 - sum(busy) / (num_SM * makespan);
    tail_ns: time during which fewer than half the SMs are busy; tail_items: items resident for at least 5 % of
    that time (what the tail waits for); tail_intervals: when the tail happens;
    segments: every item's residence (for a per-SM Gantt chart).
    """

    predicted_ns: float
    makespan_ns: float
    sm_busy_ns: tuple[float, ...]
    sm_idle_fraction: float
    tail_ns: float
    tail_items: tuple[WorkItem, ...]
    segments: tuple[Segment, ...]
    tail_intervals: tuple[tuple[float, float], ...] = ()


def _tail_items(
    segments: tuple[Segment, ...], tail_ns: float, intervals: list[tuple[float, float]]
) -> tuple[WorkItem, ...]:
    """Items resident for at least TAIL_ITEM_SHARE of the tail: each segment's overlap with the tail intervals
    (sorted, disjoint), summed over the intervals it can touch (the others add 0). Only segments at least that
    long and inside the tail's span can qualify; numpy finds them."""
    if tail_ns <= 0 or not intervals or not segments:
        return ()
    need = TAIL_ITEM_SHARE * tail_ns
    n = len(segments)
    seg_start = np.fromiter(map(START_NS, segments), dtype=np.float64, count=n)  # C-level field reads
    seg_end = np.fromiter(map(END_NS, segments), dtype=np.float64, count=n)
    # Overlap <= duration, up to rounding: the margin keeps every segment the exact sum below could accept.
    maybe = (seg_end - seg_start >= need * (1 - 1e-9)) & (seg_end > intervals[0][0]) & (seg_start < intervals[-1][1])
    starts = [a for a, _ in intervals]
    ends = [b for _, b in intervals]
    out = []
    for k in np.flatnonzero(maybe).tolist():
        seg = segments[k]
        s0, e0 = seg.start_ns, seg.end_ns
        lo = bisect.bisect_right(ends, s0)  # intervals ending at or before the start overlap by 0
        hi = bisect.bisect_left(starts, e0)  # intervals starting at or after the end overlap by 0
        if lo < hi and sum(
            max(0.0, min(e0, intervals[i][1]) - max(s0, intervals[i][0])) for i in range(lo, hi)
        ) >= need:
            out.append(seg.item)
    return tuple(out)


def simulate(plan: Plan, gpu: GPU, occ: int, cost: CostModel, detail: bool = True) -> SimResult:
    """Simulate `plan` on `gpu` with `occ` resident CTAs per SM (ignored for persistent plans).

    Returns predicted time, per-SM busy time, idle fraction, tail and per-item segments (see module doc).
    detail=False skips the per-item segments and tail items (faster; times and fractions are unchanged).
    """
    with gc_paused():
        return _simulate(plan, gpu, occ, cost, detail)


def _simulate(plan: Plan, gpu: GPU, occ: int, cost: CostModel, detail: bool) -> SimResult:
    items = plan.work_items
    num_sms = gpu.num_sms
    lay = layout(plan, num_sms, occ)
    sm_of_slot = lay.sm_of_slot
    overhead = cost.item_overhead_tokens
    work_of = [k + overhead for k in lay.kv_tokens]
    max_res = max(1, -(-len(sm_of_slot) // num_sms))  # most slots any SM has
    rate = [cost.per_cta_rate(n) for n in range(max_res + 1)]  # per-CTA rate with n resident
    demand_of = [n * rate[n] for n in range(max_res + 1)]  # an SM's total demand with n resident
    gpu_rate = cost.gpu_rate
    global_queue = lay.global_order[::-1]  # pop() from the end = next in order
    single = len(sm_of_slot) <= num_sms  # one slot per SM at most; slot k on SM k
    run = None
    if single and lay.worker_items is not None and lay.worker_counts is not None:
        run = run_static(items, lay.worker_items, lay.worker_counts, work_of, rate, demand_of, gpu_rate, num_sms,
                         detail)
    elif single:
        run = run_single(items, len(sm_of_slot), global_queue, work_of, rate, demand_of, gpu_rate, num_sms, detail)
    if run is None:
        run = run_shared(items, sm_of_slot, lay.static_queues(), global_queue, work_of, rate, demand_of, gpu_rate,
                         num_sms, detail)
    makespan = run.t
    idle = 1.0 - sum(run.busy) / (num_sms * makespan) if makespan > 0 else 0.0
    return SimResult(
        predicted_ns=makespan + cost.launch_ns,
        makespan_ns=makespan,
        sm_busy_ns=tuple(run.busy),
        sm_idle_fraction=max(idle, 0.0),
        tail_ns=run.tail_ns,
        tail_items=_tail_items(run.segments, run.tail_ns, run.tail_intervals),
        segments=run.segments,
        tail_intervals=tuple(run.tail_intervals),
    )
