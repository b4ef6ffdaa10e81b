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

Three implementations give bit-identical results (tests/test_model_fast_paths.py): the general event loop
(_run_shared); the same loop with one slot per SM (_run_single: FA3, occupancy 1); and, for static persistent plans
with one worker per SM (FlashInfer SM90), a numpy computation of the same arithmetic (_run_static), which hands
over to the loop in the rare cases where it cannot be sure to match it. Plans and simulations pause the cyclic
garbage collector while they build their objects (planners.types.gc_paused).
"""

from __future__ import annotations

import bisect
import heapq
import math
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from traceinsight.model.gpus import GPU
from traceinsight.model.planners.types import Plan, WorkItem, gc_paused


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


class Segment(NamedTuple):
    """One work item's residence on an SM: [start_ns, end_ns) on SM `sm`, slot/worker `slot`. A named tuple: a
    serving launch has 10^3-10^4 of them, made at C speed from the loop's tuples (`_segments`)."""

    sm: int
    slot: int
    start_ns: float
    end_ns: float
    item: WorkItem


_as_segment = partial(tuple.__new__, Segment)
_CTA = itemgetter(WorkItem._fields.index("cta"))
_WORKER = itemgetter(WorkItem._fields.index("worker"))
_START_NS = itemgetter(Segment._fields.index("start_ns"))
_END_NS = itemgetter(Segment._fields.index("end_ns"))


def _segments(rows: Iterable[tuple[int, int, float, float, WorkItem]]) -> tuple[Segment, ...]:
    """Segments of (sm, slot, start_ns, end_ns, item) tuples, in order."""
    return tuple(map(_as_segment, rows))


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


@dataclass
class _Layout:
    """How a plan's items reach the SMs: SM of each slot; for static plans each worker's items (item indices
    grouped by worker, in plan order, and the count per worker), else the global dispatch order (item indices,
    -1 for padding CTAs); the items' KV tokens."""

    sm_of_slot: list[int]
    kv_tokens: list[int]
    worker_items: np.ndarray | None = None
    worker_counts: np.ndarray | None = None
    global_order: list[int] = field(default_factory=list)

    def static_queues(self) -> list[list[int]]:
        """Each worker's item indices in run order (empty for plans without static assignment)."""
        if self.worker_items is None or self.worker_counts is None:
            return []
        cuts = np.cumsum(self.worker_counts)[:-1]
        return [q.tolist() for q in np.split(self.worker_items, cuts)]


def _cta_order(ctas: list[int], num_ctas: int) -> list[int]:
    """The dispatch order of a non-persistent grid: for each linear CTA index 0..max(num_ctas, items) - 1 the item it
    runs, -1 for padding CTAs; plan order when the items' CTAs are not distinct or run past the grid. In numpy:
    the dict-and-list version cost a fifth of a serving launch's layout."""
    n = len(ctas)
    size = max(num_ctas, n)
    if not n:
        return [-1] * size
    c = np.array(ctas, dtype=np.int64)
    if int(c.min()) < 0:  # a negative CTA index is never dispatched (as the dict version: no c in range() is < 0)
        by_cta = {x: i for i, x in enumerate(ctas)}
        if len(by_cta) != n or max(by_cta) >= size:
            return list(range(n))
        return [by_cta.get(x, -1) for x in range(size)]
    if int(c.max()) >= size:
        return list(range(n))
    order = np.full(size, -1, dtype=np.int64)
    order[c] = np.arange(n, dtype=np.int64)
    if int(np.count_nonzero(order >= 0)) != n:  # repeated CTA indices
        return list(range(n))
    return order.tolist()


def _build_layout(plan: Plan, num_sms: int, occ: int) -> _Layout:
    items = plan.work_items
    kv = plan.item_kv_tokens
    if not plan.persistent:
        n_slots = num_sms * max(occ, 1)
        # Linear CTA order with padding CTAs (no work item) as -1.
        order = _cta_order(list(map(_CTA, items)), plan.num_ctas)
        return _Layout([k % num_sms for k in range(n_slots)], kv, global_order=order)
    workers = plan.grid[0]
    sm_of = [w % num_sms for w in range(workers)]
    assigned = list(map(_WORKER, items))
    if None not in assigned:  # each worker's items in plan order: a stable sort by worker
        w = np.array(assigned, dtype=np.int64) % workers
        return _Layout(sm_of, kv, np.argsort(w, kind="stable"), np.bincount(w, minlength=workers))
    ctas = list(map(_CTA, items))
    if sorted(ctas) == ctas:  # already in pull order (FA3): the stable sort by CTA changes nothing
        return _Layout(sm_of, kv, global_order=list(range(len(items))))
    return _Layout(sm_of, kv, global_order=sorted(range(len(items)), key=ctas.__getitem__))


# Layouts of the plans simulated last, by id(plan) (plans are immutable; the weak reference drops the entry when its
# plan goes): calibration simulates the same plans under many cost models.
_LAYOUTS: dict[int, tuple[weakref.ref[Plan], int, int, _Layout]] = {}
_LAYOUTS_KEPT = 64
_LAYOUTS_LOCK = threading.Lock()


def _layout(plan: Plan, num_sms: int, occ: int) -> _Layout:
    key = id(plan)
    hit = _LAYOUTS.get(key)
    if hit is not None and hit[0]() is plan and hit[1] == num_sms and hit[2] == occ:
        return hit[3]
    lay = _build_layout(plan, num_sms, occ)

    def forget(_: weakref.ref[Plan]) -> None:
        _LAYOUTS.pop(key, None)

    with _LAYOUTS_LOCK:
        while len(_LAYOUTS) >= _LAYOUTS_KEPT:
            del _LAYOUTS[next(iter(_LAYOUTS))]
        _LAYOUTS[key] = (weakref.ref(plan, forget), num_sms, occ, lay)
    return lay


@dataclass
class _Run:
    """What a simulation loop hands back: end time (ns), per-SM busy time, the tail, and with detail the
    segments in completion order (CTAs completing together: in dispatch order)."""

    t: float
    busy: list[float]
    tail_ns: float
    tail_intervals: list[tuple[float, float]]
    segments: tuple[Segment, ...] = ()


def _add_tail(intervals: list[tuple[float, float]], t: float, dt: float) -> None:
    """Append [t, t + dt) to the tail, extending the last interval when it ends at t."""
    if intervals and abs(intervals[-1][1] - t) <= _EPS * max(t, 1.0):
        intervals[-1] = (intervals[-1][0], t + dt)
    else:
        intervals.append((t, t + dt))


def _run_shared(
    items: tuple[WorkItem, ...],
    sm_of_slot: list[int],
    static_queues: list[list[int]],
    global_queue: list[int],
    work_of: list[float],
    rate: list[float],
    demand_of: list[float],
    gpu_rate: float | None,
    num_sms: int,
    detail: bool,
) -> _Run:
    """The event loop, for SMs holding several CTAs each (processor sharing among the residents of an SM).

    Virtual time v: an SM with n residents gives each rate[n] tokens per unit of v; real time advances by dv / scale,
    scale < 1 while the SMs' total demand exceeds gpu_rate. Every SM has at most one event (its next completion) in
    `events`: (v, number of earlier events of that SM, sm), so that ties pop in a fixed order. Completions within
    _EPS (relative) of the first are handled together, at its time.
    """
    heappush, heappop, heapreplace = heapq.heappush, heapq.heappop, heapq.heapreplace
    static_queues = [q[::-1] for q in static_queues]  # pop() from the end = next in order
    n_res = [0] * num_sms
    level = [0.0] * num_sms  # service received per resident CTA since the start (tokens)
    v_mark = [0.0] * num_sms  # virtual time at which `level` was last brought up to date
    version = [0] * num_sms
    sm_heaps: list[list[tuple[float, int, int, int, float]]] = [[] for _ in range(num_sms)]
    events: list[tuple[float, int, int]] = []
    busy = [0.0] * num_sms
    segments: list[tuple[int, int, float, float, WorkItem]] = []
    seq = 0
    t = 0.0
    v = 0.0
    busy_sms = 0
    tail_ns = 0.0
    tail_intervals: list[tuple[float, float]] = []
    half = num_sms * TAIL_FRACTION_OF_SMS
    eps = _EPS

    # First wave: slot k gets the k-th CTA (or its worker's first item).
    for slot, sm in enumerate(sm_of_slot):
        if static_queues:
            q = static_queues[slot]
            if not q:
                continue
            idx = q.pop()
        elif global_queue:
            idx = global_queue.pop()
        else:
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
        v_next = events[0][0]
        scale = 1.0 if gpu_rate is None or demand <= gpu_rate else gpu_rate / demand
        dt = (v_next - v) / scale if v_next > v else 0.0
        if dt > 0 and busy_sms < half:
            tail_ns += dt
            _add_tail(tail_intervals, t, dt)
        t += dt
        if v_next > v:
            v = v_next
        # Every SM whose next completion is now; their finished CTAs hand slots over in dispatch order.
        lim_v = v + eps * (v if v > 1.0 else 1.0)
        n_ev = len(events)
        if (n_ev < 2 or events[1][0] > lim_v) and (n_ev < 3 or events[2][0] > lim_v):
            # One SM alone completes now (the next event, the smaller of the root's children, is later): the steps
            # below for one touched SM, its event replaced in place. Most events of a serving launch are these.
            s = events[0][2]
            n = n_res[s]
            lev = level[s] + rate[n] * (v - v_mark[s])
            level[s] = lev
            v_mark[s] = v
            heap = sm_heaps[s]
            lim = lev + eps * (lev if lev > 1.0 else 1.0)
            n_h = len(heap)
            if (n_h and heap[0][0] <= lim and (n_h < 2 or heap[1][0] > lim) and (n_h < 3 or heap[2][0] > lim)
                    and (static_queues[heap[0][2]] if static_queues else global_queue)):
                # ...and one CTA of it, whose slot takes the next CTA at once: the resident replaced in place.
                _, sq, slot, idx, t0 = heap[0]
                demand -= demand_of[n]
                if detail and idx >= 0:
                    segments.append((s, slot, t0, t, items[idx]))
                nxt1 = static_queues[slot].pop() if static_queues else global_queue.pop()
                heapreplace(heap, (lev + (work_of[nxt1] if nxt1 >= 0 else 0.0), seq, slot, nxt1, t))
                seq += 1
                demand += demand_of[n]
                version[s] += 1
                heapreplace(events, (v + (heap[0][0] - lev) / rate[n], version[s], s))
                continue
            done1: list[tuple[int, int, int, float]] = []  # (seq, slot, idx, start)
            while heap and heap[0][0] <= lim:
                _, sq, slot, idx, t0 = heappop(heap)
                done1.append((sq, slot, idx, t0))
            demand -= demand_of[n]
            if len(done1) > 1:
                done1.sort()
            for _, slot, idx, t0 in done1:
                if detail and idx >= 0:
                    segments.append((s, slot, t0, t, items[idx]))
                if static_queues:
                    q = static_queues[slot]
                    nxt = q.pop() if q else None
                else:
                    nxt = global_queue.pop() if global_queue else None
                if nxt is None:
                    n_res[s] -= 1
                    if n_res[s] == 0:
                        busy[s] = t
                        busy_sms -= 1
                else:
                    heappush(heap, (level[s] + (work_of[nxt] if nxt >= 0 else 0.0), seq, slot, nxt, t))
                    seq += 1
            n = n_res[s]
            demand += demand_of[n]
            version[s] += 1
            if heap:
                heapreplace(events, (v + (heap[0][0] - level[s]) / rate[n], version[s], s))
            else:
                heappop(events)
            continue
        touched = [heappop(events)[2]]
        while events and events[0][0] <= lim_v:
            touched.append(heappop(events)[2])
        done: list[tuple[int, int, int, int, float]] = []  # (seq, sm, slot, idx, start)
        for s in touched:
            n = n_res[s]
            lev = level[s] + rate[n] * (v - v_mark[s])
            level[s] = lev
            v_mark[s] = v
            heap = sm_heaps[s]
            lim = lev + eps * (lev if lev > 1.0 else 1.0)
            while heap and heap[0][0] <= lim:
                _, sq, slot, idx, t0 = heappop(heap)
                done.append((sq, s, slot, idx, t0))
            demand -= demand_of[n]
        if len(done) > 1:
            done.sort()
        for _, s, slot, idx, t0 in done:
            if detail and idx >= 0:
                segments.append((s, slot, t0, t, items[idx]))
            if static_queues:
                q = static_queues[slot]
                nxt = q.pop() if q else None
            else:
                nxt = global_queue.pop() if global_queue else None
            if nxt is None:
                n_res[s] -= 1
                if n_res[s] == 0:  # an SM that empties stays empty: no work is left for its slots
                    busy[s] = t
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
    return _Run(t, busy, tail_ns, tail_intervals, _segments(segments))


def _run_single(
    items: tuple[WorkItem, ...],
    n_slots: int,
    global_queue: list[int],
    work_of: list[float],
    rate: list[float],
    demand_of: list[float],
    gpu_rate: float | None,
    num_sms: int,
    detail: bool,
) -> _Run:
    """_run_shared for one slot per SM at most (slot k on SM k) pulling from the global queue: the same arithmetic
    in the same order, with the one resident item of each SM in plain lists instead of a heap."""
    heappush, heappop, heapreplace = heapq.heappush, heapq.heappop, heapq.heapreplace
    r1, d1 = rate[1], demand_of[1]
    has = [False] * num_sms  # SM holds an item
    key = [0.0] * num_sms  # `level` at which the resident item completes
    cseq = [0] * num_sms
    cidx = [0] * num_sms
    ct0 = [0.0] * num_sms
    level = [0.0] * num_sms
    v_mark = [0.0] * num_sms
    version = [0] * num_sms
    events: list[tuple[float, int, int]] = []
    busy = [0.0] * num_sms
    segments: list[tuple[int, int, float, float, WorkItem]] = []
    seq = 0
    t = 0.0
    v = 0.0
    busy_sms = 0
    tail_ns = 0.0
    tail_intervals: list[tuple[float, float]] = []
    half = num_sms * TAIL_FRACTION_OF_SMS
    eps = _EPS

    for s in range(min(n_slots, len(global_queue))):
        idx = global_queue.pop()
        busy_sms += 1
        has[s] = True
        key[s] = work_of[idx] if idx >= 0 else 0.0
        cseq[s] = seq
        cidx[s] = idx
        seq += 1
    demand = 0.0
    for s in range(num_sms):
        if has[s]:
            demand += d1
            heappush(events, (key[s] / r1, 0, s))
        else:
            demand += demand_of[0]

    while events:
        v_next = events[0][0]
        scale = 1.0 if gpu_rate is None or demand <= gpu_rate else gpu_rate / demand
        dt = (v_next - v) / scale if v_next > v else 0.0
        if dt > 0 and busy_sms < half:
            tail_ns += dt
            _add_tail(tail_intervals, t, dt)
        t += dt
        if v_next > v:
            v = v_next
        lim_v = v + eps * (v if v > 1.0 else 1.0)
        n_ev = len(events)
        if (n_ev < 2 or events[1][0] > lim_v) and (n_ev < 3 or events[2][0] > lim_v):
            # One SM alone completes now: the steps below for one touched SM, its event replaced in place.
            s = events[0][2]
            lev = level[s] + r1 * (v - v_mark[s])
            level[s] = lev
            v_mark[s] = v
            demand -= d1
            if key[s] <= lev + eps * (lev if lev > 1.0 else 1.0):
                idx = cidx[s]
                if detail and idx >= 0:
                    segments.append((s, s, ct0[s], t, items[idx]))
                if global_queue:
                    nxt = global_queue.pop()
                    key[s] = lev + (work_of[nxt] if nxt >= 0 else 0.0)
                    cseq[s] = seq
                    cidx[s] = nxt
                    ct0[s] = t
                    seq += 1
                else:
                    has[s] = False
                    busy[s] = t
                    busy_sms -= 1
            version[s] += 1
            if has[s]:
                demand += d1
                heapreplace(events, (v + (key[s] - lev) / r1, version[s], s))
            else:
                demand += demand_of[0]
                heappop(events)
            continue
        touched = [heappop(events)[2]]
        while events and events[0][0] <= lim_v:
            touched.append(heappop(events)[2])
        done: list[tuple[int, int]] = []  # (seq, sm)
        for s in touched:
            lev = level[s] + r1 * (v - v_mark[s])
            level[s] = lev
            v_mark[s] = v
            if key[s] <= lev + eps * (lev if lev > 1.0 else 1.0):
                done.append((cseq[s], s))
            demand -= d1
        if len(done) > 1:
            done.sort()
        for _, s in done:
            idx = cidx[s]
            if detail and idx >= 0:
                segments.append((s, s, ct0[s], t, items[idx]))
            if global_queue:
                nxt = global_queue.pop()
                key[s] = level[s] + (work_of[nxt] if nxt >= 0 else 0.0)
                cseq[s] = seq
                cidx[s] = nxt
                ct0[s] = t
                seq += 1
            else:
                has[s] = False
                busy[s] = t
                busy_sms -= 1
        for s in touched:
            version[s] += 1
            if has[s]:
                demand += d1
                heappush(events, (v + (key[s] - level[s]) / r1, version[s], s))
            else:
                demand += demand_of[0]
    return _Run(t, busy, tail_ns, tail_intervals, _segments(segments))


def _run_static(
    items: tuple[WorkItem, ...],
    worker_items: np.ndarray,
    worker_counts: np.ndarray,
    work_of: list[float],
    rate: list[float],
    demand_of: list[float],
    gpu_rate: float | None,
    num_sms: int,
    detail: bool,
) -> _Run | None:
    """The event loop's result for static per-worker queues with one worker per SM at most (worker k on SM k),
    computed in bulk with numpy, doing the same float operations in the same order; None when that cannot be
    guaranteed (two completions within _EPS of each other but not equal, which the loop would merge, or an item
    without work), and the caller then runs the loop.

    Each SM runs its queue back to back, so its completions in virtual time follow from its own items alone
    (computed for all SMs at once, item by item). The completions of all SMs, sorted as the loop pops them, then
    give the real time of each (the HBM scale between completions depends only on how many SMs are still busy),
    the tail, and each SM's busy time.
    """
    r1, d1 = rate[1], demand_of[1]
    eps = _EPS
    n_w = len(worker_counts)
    lens = worker_counts
    m = int(lens.max()) if n_w else 0
    if m == 0:
        return None
    flat_idx = worker_items  # item indices by SM, each SM's in run order
    work = np.array(work_of, dtype=np.float64)[flat_idx]
    if not (work > 0).all():
        return None
    valid = np.arange(m) < lens[:, None]  # (SM, k-th item of the SM)
    w = np.zeros((n_w, m))
    w[valid] = work
    # Virtual completion times, item by item for all SMs at once (the loop's arithmetic; rows past their last
    # item carry zero work and are masked out).
    ev = np.empty((n_w, m))
    key = w[:, 0].copy()  # `level` at which the resident item completes
    e = key / r1
    level = np.zeros(n_w)
    v_mark = np.zeros(n_w)
    for j in range(m):
        ev[:, j] = e
        lev = level + r1 * (e - v_mark)
        done = key <= lev + eps * np.where(lev > 1.0, lev, 1.0)
        if not done[valid[:, j]].all():
            return None
        level, v_mark = lev, e
        if j + 1 < m:
            key = lev + w[:, j + 1]
            e = e + (key - lev) / r1
    if m > 1 and not (ev[:, 1:] > ev[:, :-1])[valid[:, 1:]].all():
        return None
    # All completions in the loop's pop order (v, k, SM); a group = the completions at one instant.
    sm_f, k_f = np.nonzero(valid)  # flat order: by SM, then k (the order of flat_idx)
    v_f = ev[sm_f, k_f]
    order = np.lexsort((sm_f, k_f, v_f))
    u = v_f[order]
    first = np.empty(len(u), dtype=bool)
    first[0] = True
    np.not_equal(u[1:], u[:-1], out=first[1:])
    g_v = u[first]  # time of each group (virtual), increasing
    if len(g_v) > 1 and (g_v[1:] <= (g_v + eps * np.where(g_v > 1.0, g_v, 1.0))[:-1]).any():
        return None  # the loop would merge these completions
    g_start = np.flatnonzero(first)
    g_size = np.diff(np.append(g_start, len(u)))
    group_f = np.empty(len(u), dtype=np.int64)  # group of each completion, by flat index
    group_f[order] = np.cumsum(first) - 1
    last_f = np.cumsum(lens)[lens > 0] - 1  # flat index of each busy SM's last completion
    n_groups = len(g_v)
    ends = np.bincount(group_f[last_f], minlength=n_groups)  # SMs going idle at each group
    busy_before = int((lens > 0).sum()) - np.concatenate(([0], np.cumsum(ends)[:-1]))
    if gpu_rate is None:
        dt = np.diff(g_v, prepend=0.0)
    else:  # the loop's running sum of the SMs' demand, updated in its order (memoized: groups repeat)
        demand = 0.0
        for _ in range(int(busy_before[0])):
            demand += d1
        before = []
        after: dict[tuple[float, int, int], float] = {}
        for c, gone in zip(g_size.tolist(), ends.tolist(), strict=True):
            before.append(demand)
            if c == 1:
                demand = demand - d1 if gone else demand - d1 + d1
                continue
            hit = after.get((demand, c, gone))
            if hit is None:
                hit = demand
                for _ in range(c):
                    hit -= d1
                for _ in range(c - gone):
                    hit += d1
                after[(demand, c, gone)] = hit
            demand = hit
        dem = np.array(before)
        scale = np.where(dem <= gpu_rate, 1.0, gpu_rate / np.where(dem > 0, dem, 1.0))
        dt = np.diff(g_v, prepend=0.0) / scale
    t_g = np.cumsum(dt)  # real time at each group (sequential sums, as the loop's t += dt)
    in_tail = busy_before < num_sms * TAIL_FRACTION_OF_SMS
    tail_ns = float(np.cumsum(dt[in_tail])[-1]) if in_tail.any() else 0.0
    tail_intervals: list[tuple[float, float]] = []
    tail_groups = np.flatnonzero(in_tail)
    if tail_groups.size:
        cut = np.flatnonzero(np.diff(tail_groups) > 1)
        run_first = tail_groups[np.append(0, cut + 1)]
        run_last = tail_groups[np.append(cut, tail_groups.size - 1)]
        t_prev = np.concatenate(([0.0], t_g[:-1]))
        for a, b in zip(t_prev[run_first].tolist(), t_g[run_last].tolist(), strict=True):
            _add_tail(tail_intervals, a, b - a)
            tail_intervals[-1] = (tail_intervals[-1][0], b)  # b itself, not a + (b - a)
    busy = [0.0] * num_sms
    busy_sms_t = t_g[group_f[last_f]].tolist()
    for s, b in zip(np.flatnonzero(lens > 0).tolist(), busy_sms_t, strict=True):
        busy[s] = b
    segments: tuple[Segment, ...] = ()
    if detail:
        segments = _static_segments(items, worker_items, sm_f, k_f, order, g_start, g_size, group_f, t_g)
    return _Run(float(t_g[-1]), busy, tail_ns, tail_intervals, segments)


def _static_segments(
    items: tuple[WorkItem, ...],
    flat_idx: np.ndarray,
    sm_f: np.ndarray,
    k_f: np.ndarray,
    order: np.ndarray,
    g_start: np.ndarray,
    g_size: np.ndarray,
    group_f: np.ndarray,
    t_g: np.ndarray,
) -> tuple[Segment, ...]:
    """_run_static's segments in the loop's order. Completions are indexed flat (by SM, then k-th item of the SM);
    `order` sorts them by (v, k, SM), g_start / g_size delimit its groups, group_f is each one's group and t_g the
    real time of each group. Within a group the loop hands slots over in dispatch order: first-wave items by SM,
    then the others in the order their predecessors (the SM's previous item) completed."""
    n = len(order)
    n_w = int(sm_f.max()) + 1
    rank_a = np.empty(n, dtype=np.int64)  # position in completion order, by flat index
    rank_a[order] = np.arange(n)
    rank = rank_a.tolist()
    order_l = order.tolist()
    first_wave = np.where(k_f > 0, 0, sm_f - n_w).tolist()  # < 0: dispatched in the first wave, by SM
    multi = g_size > 1
    for a, c in zip(g_start[multi].tolist(), g_size[multi].tolist(), strict=True):
        members = order_l[a:a + c]
        keys = [first_wave[f] if first_wave[f] < 0 else rank[f - 1] for f in members]
        if keys == sorted(keys):  # already in (v, k, SM) order, as when SMs run in lockstep
            continue
        for pos, i in enumerate(sorted(range(c), key=keys.__getitem__), a):
            rank[members[i]] = pos
    done_f = np.empty(n, dtype=np.int64)
    done_f[np.array(rank, dtype=np.int64)] = np.arange(n)
    t_end = t_g[group_f]
    t_start = np.where(k_f > 0, np.concatenate(([0.0], t_end[:-1])), 0.0)
    sms = sm_f[done_f].tolist()
    return _segments(zip(sms, sms, t_start[done_f].tolist(), t_end[done_f].tolist(),
                         [items[i] for i in flat_idx[done_f].tolist()], strict=True))


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
    seg_start = np.fromiter(map(_START_NS, segments), dtype=np.float64, count=n)  # C-level field reads
    seg_end = np.fromiter(map(_END_NS, segments), dtype=np.float64, count=n)
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
    lay = _layout(plan, num_sms, occ)
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
        run = _run_static(items, lay.worker_items, lay.worker_counts, work_of, rate, demand_of, gpu_rate, num_sms,
                          detail)
    elif single:
        run = _run_single(items, len(sm_of_slot), global_queue, work_of, rate, demand_of, gpu_rate, num_sms, detail)
    if run is None:
        run = _run_shared(items, sm_of_slot, lay.static_queues(), global_queue, work_of, rate, demand_of, gpu_rate,
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
