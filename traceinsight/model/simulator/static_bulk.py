"""The simulator's bulk path for static persistent plans with one worker per SM (FlashInfer SM90): the event loop's
result computed with numpy, the same float operations in the same order, or None where it cannot be sure to
match the loop."""

from __future__ import annotations

import numpy as np

from traceinsight.model.planners.types import WorkItem
from traceinsight.model.simulator.core import EPS, TAIL_FRACTION_OF_SMS, Run, Segment, add_tail, as_segments


def run_static(
    items: tuple[WorkItem, ...],
    worker_items: np.ndarray,
    worker_counts: np.ndarray,
    work_of: list[float],
    rate: list[float],
    demand_of: list[float],
    gpu_rate: float | None,
    num_sms: int,
    detail: bool,
) -> Run | None:
    """The event loop's result for static per-worker queues with one worker per SM at most (worker k on SM k),
    computed in bulk with numpy, doing the same float operations in the same order; None when that cannot be
    guaranteed (two completions within EPS of each other but not equal, which the loop would merge, or an item
    without work), and the caller then runs the loop.

    Each SM runs its queue back to back, so its completions in virtual time follow from its own items alone
    (computed for all SMs at once, item by item). The completions of all SMs, sorted as the loop pops them, then
    give the real time of each (the HBM scale between completions depends only on how many SMs are still busy),
    the tail, and each SM's busy time.
    """
    r1, d1 = rate[1], demand_of[1]
    eps = EPS
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
            add_tail(tail_intervals, a, b - a)
            tail_intervals[-1] = (tail_intervals[-1][0], b)  # b itself, not a + (b - a)
    busy = [0.0] * num_sms
    busy_sms_t = t_g[group_f[last_f]].tolist()
    for s, b in zip(np.flatnonzero(lens > 0).tolist(), busy_sms_t, strict=True):
        busy[s] = b
    segments: tuple[Segment, ...] = ()
    if detail:
        segments = _staticas_segments(items, worker_items, sm_f, k_f, order, g_start, g_size, group_f, t_g)
    return Run(float(t_g[-1]), busy, tail_ns, tail_intervals, segments)


def _staticas_segments(
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
    """run_static's segments in the loop's order. Completions are indexed flat (by SM, then k-th item of the SM);
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
    return as_segments(zip(sms, sms, t_start[done_f].tolist(), t_end[done_f].tolist(),
                           [items[i] for i in flat_idx[done_f].tolist()], strict=True))
