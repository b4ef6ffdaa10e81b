"""The simulator's general event loop: SMs holding several CTAs each, processor sharing among the residents of an
SM, static per-worker queues or one global dispatch order (see traceinsight.model.simulate)."""

from __future__ import annotations

import heapq

from traceinsight.model.planners.types import WorkItem
from traceinsight.model.simulator.core import EPS, TAIL_FRACTION_OF_SMS, Run, add_tail, as_segments


def run_shared(
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
) -> Run:
    """The event loop, for SMs holding several CTAs each (processor sharing among the residents of an SM).

    Virtual time v: an SM with n residents gives each rate[n] tokens per unit of v; real time advances by dv / scale,
    scale < 1 while the SMs' total demand exceeds gpu_rate. Every SM has at most one event (its next completion) in
    `events`: (v, number of earlier events of that SM, sm), so that ties pop in a fixed order. Completions within
    EPS (relative) of the first are handled together, at its time.
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
    eps = EPS

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
            add_tail(tail_intervals, t, dt)
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
    return Run(t, busy, tail_ns, tail_intervals, as_segments(segments))
