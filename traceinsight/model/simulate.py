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
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from traceinsight.model.gpus import GPU
from traceinsight.model.planners.types import Plan, WorkItem


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
        return 1.0 / (a**p + b**p) ** (1.0 / p)


@dataclass(frozen=True, slots=True)
class Segment:
    """One work item's residence on an SM: [start_ns, end_ns) on SM `sm`, slot/worker `slot`."""

    sm: int
    slot: int
    start_ns: float
    end_ns: float
    item: WorkItem


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


_EPS = 1e-9
TAIL_FRACTION_OF_SMS = 0.5  # the tail: time during which fewer than this share of the SMs is busy
TAIL_ITEM_SHARE = 0.05  # an item belongs to the tail when resident for at least this share of it


def _slots(plan: Plan, gpu: GPU, occ: int) -> tuple[list[int], list[list[int]], list[int]]:
    """(SM of each slot, initial per-slot queues for static plans, global queue of item indices)."""
    items = plan.work_items
    num_sms = gpu.num_sms
    if not plan.persistent:
        n_slots = num_sms * max(occ, 1)
        # Linear CTA order with padding CTAs (no work item) as -1.
        by_cta = {it.cta: i for i, it in enumerate(items)}
        order = [by_cta.get(c, -1) for c in range(max(plan.num_ctas, len(items)))]
        if len(by_cta) != len(items) or (by_cta and max(by_cta) >= len(order)):
            order = list(range(len(items)))
        return [k % num_sms for k in range(n_slots)], [], order
    workers = plan.grid[0]
    sm_of = [w % num_sms for w in range(workers)]
    if all(it.worker is not None for it in items):
        queues: list[list[int]] = [[] for _ in range(workers)]
        for i, it in enumerate(items):
            queues[it.worker % workers].append(i)  # type: ignore[operator]
        return sm_of, [q[::-1] for q in queues], []
    return sm_of, [], sorted(range(len(items)), key=lambda i: items[i].cta)


def simulate(plan: Plan, gpu: GPU, occ: int, cost: CostModel, detail: bool = True) -> SimResult:
    """Simulate `plan` on `gpu` with `occ` resident CTAs per SM (ignored for persistent plans).

    Returns predicted time, per-SM busy time, idle fraction, tail and per-item segments (see module doc).
    detail=False skips the per-item segments and tail items (faster; times and fractions are unchanged).
    """
    items = plan.work_items
    num_sms = gpu.num_sms
    sm_of_slot, static_queues, global_queue = _slots(plan, gpu, occ)
    global_queue.reverse()  # pop() from the end = next in order
    overhead = cost.item_overhead_tokens
    work_of = [it.kv_tokens + overhead for it in items]
    max_res = max(1, -(-len(sm_of_slot) // num_sms))  # most slots any SM has
    rate = [cost.per_cta_rate(n) for n in range(max_res + 1)]  # per-CTA rate with n resident
    demand_of = [n * rate[n] for n in range(max_res + 1)]  # an SM's total demand with n resident
    gpu_rate = cost.gpu_rate

    n_res = [0] * num_sms
    level = [0.0] * num_sms  # service received per resident CTA since the start (tokens)
    v_mark = [0.0] * num_sms  # virtual time at which `level` was last brought up to date
    version = [0] * num_sms
    sm_heaps: list[list[tuple[float, int, int, int, float]]] = [[] for _ in range(num_sms)]
    events: list[tuple[float, int, int]] = []  # (virtual finish time, version, sm)
    busy_since = [0.0] * num_sms
    busy = [0.0] * num_sms
    segments: list[Segment] = []
    seq = 0
    t = 0.0
    v = 0.0
    busy_sms = 0
    tail_ns = 0.0
    tail_intervals: list[tuple[float, float]] = []
    half = num_sms * TAIL_FRACTION_OF_SMS
    heappush, heappop = heapq.heappush, heapq.heappop

    def pull(slot: int) -> int | None:
        if static_queues:
            q = static_queues[slot]
            return q.pop() if q else None
        return global_queue.pop() if global_queue else None

    # First wave: slot k gets the k-th CTA (or its worker's first item).
    for slot, sm in enumerate(sm_of_slot):
        idx = pull(slot)
        if idx is None:
            if static_queues:
                continue
            break
        if n_res[sm] == 0:
            busy_sms += 1
        n_res[sm] += 1
        heappush(sm_heaps[sm], (work_of[idx] if idx >= 0 else 0.0, seq, slot, idx, 0.0))
        seq += 1
    demand = 0.0
    for sm in range(num_sms):
        demand += demand_of[n_res[sm]]
        if sm_heaps[sm]:
            heappush(events, (sm_heaps[sm][0][0] / rate[n_res[sm]], 0, sm))

    while events:
        v_next, ver, sm = events[0]
        if ver != version[sm]:
            heappop(events)
            continue
        scale = 1.0 if gpu_rate is None or demand <= gpu_rate else gpu_rate / demand
        dt = (v_next - v) / scale if v_next > v else 0.0
        if dt > 0 and busy_sms < half:
            tail_ns += dt
            if tail_intervals and abs(tail_intervals[-1][1] - t) <= _EPS * max(t, 1.0):
                tail_intervals[-1] = (tail_intervals[-1][0], t + dt)
            else:
                tail_intervals.append((t, t + dt))
        t += dt
        if v_next > v:
            v = v_next
        # Every SM whose next completion is now; their finished CTAs hand slots over in dispatch order.
        touched: list[int] = []
        tol = _EPS * (v if v > 1.0 else 1.0)
        while events and events[0][0] <= v + tol:
            _, ver, s = heappop(events)
            if ver == version[s]:
                touched.append(s)
        done: list[tuple[int, int, int, int, float]] = []  # (seq, sm, slot, idx, start)
        for s in touched:
            level[s] += rate[n_res[s]] * (v - v_mark[s])
            v_mark[s] = v
            heap = sm_heaps[s]
            lim = level[s] + _EPS * (level[s] if level[s] > 1.0 else 1.0)
            while heap and heap[0][0] <= lim:
                _, sq, slot, idx, t0 = heappop(heap)
                done.append((sq, s, slot, idx, t0))
            demand -= demand_of[n_res[s]]
        if len(done) > 1:
            done.sort()
        for _, s, slot, idx, t0 in done:
            if detail and idx >= 0:
                segments.append(Segment(s, slot, t0, t, items[idx]))
            nxt = pull(slot)
            if nxt is None:
                n_res[s] -= 1
                if n_res[s] == 0:
                    busy[s] += t - busy_since[s]
                    busy_sms -= 1
            else:  # the freed slot (same SM) takes the next CTA / work item at once
                heappush(sm_heaps[s], (level[s] + (work_of[nxt] if nxt >= 0 else 0.0), seq, slot, nxt, t))
                seq += 1
        for s in touched:
            n = n_res[s]
            demand += demand_of[n]
            version[s] += 1
            heap = sm_heaps[s]
            if heap:
                heappush(events, (v + (heap[0][0] - level[s]) / rate[n], version[s], s))

    makespan = t
    for s in range(num_sms):  # SMs still marked busy (cannot happen once all work is done)
        if n_res[s]:
            busy[s] += t - busy_since[s]
    total_busy = sum(busy)
    idle = 1.0 - total_busy / (num_sms * makespan) if makespan > 0 else 0.0
    # Tail items: resident for at least TAIL_ITEM_SHARE of the tail (not the short ones it merely cut into).
    tail_items = tuple(
        seg.item
        for seg in segments
        if tail_ns > 0
        and sum(max(0.0, min(seg.end_ns, b) - max(seg.start_ns, a)) for a, b in tail_intervals)
        >= TAIL_ITEM_SHARE * tail_ns
    )
    return SimResult(
        predicted_ns=makespan + cost.launch_ns,
        makespan_ns=makespan,
        sm_busy_ns=tuple(busy),
        sm_idle_fraction=max(idle, 0.0),
        tail_ns=tail_ns,
        tail_items=tail_items,
        segments=tuple(segments),
        tail_intervals=tuple(tail_intervals),
    )
