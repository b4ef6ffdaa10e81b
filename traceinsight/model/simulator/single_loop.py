"""The simulator's event loop for one slot per SM (FA3, occupancy 1): the general loop's arithmetic in the same
order, with each SM's one resident item in plain lists instead of a heap."""

from __future__ import annotations

import heapq

from traceinsight.model.planners.types import WorkItem
from traceinsight.model.simulator.core import EPS, TAIL_FRACTION_OF_SMS, Run, add_tail, as_segments


def run_single(
    items: tuple[WorkItem, ...],
    n_slots: int,
    global_queue: list[int],
    work_of: list[float],
    rate: list[float],
    demand_of: list[float],
    gpu_rate: float | None,
    num_sms: int,
    detail: bool,
) -> Run:
    """run_shared for one slot per SM at most (slot k on SM k) pulling from the global queue: the same arithmetic
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
    eps = EPS

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
            add_tail(tail_intervals, t, dt)
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
    return Run(t, busy, tail_ns, tail_intervals, as_segments(segments))
