"""The split of many windows of one device at once, on arrays (`split_definition` is the split a window at a time):
rows of (window, component, ns) and each window's idle stretches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from traceinsight.components import IDLE_HOST, IDLE_UNKNOWN, IDLE_WAIT
from traceinsight.model.gpu_work import Work
from traceinsight.model.split_definition import LONG_HOST_GAP_NS, Split

# Windows split together by `_fast_rows` or `_sweep_rows`: their temporary arrays hold one row per interval (or
# event) of the windows, so all 229K windows of the 1M-kernel export at once (2.6M intervals) took 0.3 GB more.
FAST_CHUNK = 16_384


def _idle_class(launch: np.ndarray, idle_from: np.ndarray) -> np.ndarray:
    """`_classify` on arrays: 0 idle-host, 1 idle-wait, 2 idle-unknown."""
    return np.where(launch < 0, 2, np.where(launch >= idle_from, 0, 1))


IDLE_BY_CLASS = (IDLE_HOST, IDLE_WAIT, IDLE_UNKNOWN)


def overlap_pairs(work: Work) -> np.ndarray:
    """How many neighbouring intervals overlap up to each interval (the first i + 1)."""
    return np.concatenate(([0], np.cumsum(work.start[1:] < work.end[:-1])))


@dataclass
class Rows:
    """Windows split at once, as rows: one per (window, component) in each window's component order (busy
    components in the order they first ran, then idle ones in the order they first occurred, as `split` fills
    its dict), with its ns as `split` sums them (float64, added in the same order); and per window its idle
    stretches' count, longest idle-host stretch and idle-host time in long stretches, and those long stretches
    as rows (window, start, ns) in time order. Windows are positions in the arrays given."""

    win: np.ndarray
    label: np.ndarray  # index into work.names + IDLE_BY_CLASS
    value: np.ndarray
    idle_n: np.ndarray
    host_max: np.ndarray
    host_long: np.ndarray
    long_win: np.ndarray
    long_at: np.ndarray
    long_ns: np.ndarray


def _concat_rows(parts: list[tuple[np.ndarray, Rows]], n: int) -> Rows:
    """Rows of several calls, each for the windows at `which`, as one Rows over n windows (ordered by window)."""
    def cat(get: Any, dtype: Any) -> np.ndarray:
        return np.concatenate([get(w, r) for w, r in parts]) if parts else np.zeros(0, dtype)

    win = cat(lambda w, r: w[r.win], np.int64)
    order = np.argsort(win, kind="stable")
    long_win = cat(lambda w, r: w[r.long_win], np.int64)
    long_order = np.argsort(long_win, kind="stable")
    per_window = {}
    for key in ("idle_n", "host_max", "host_long"):
        a = np.zeros(n, np.int64)
        for w, r in parts:
            a[w] = getattr(r, key)
        per_window[key] = a
    return Rows(win[order], cat(lambda w, r: r.label, np.int64)[order], cat(lambda w, r: r.value, np.float64)[order],
                 per_window["idle_n"], per_window["host_max"], per_window["host_long"], long_win[long_order],
                 cat(lambda w, r: r.long_at, np.int64)[long_order], cat(lambda w, r: r.long_ns, np.int64)[long_order])


def _rows(n: int, n_names: int, win: np.ndarray, label: np.ndarray, ns: np.ndarray, key: np.ndarray,
          idle_win: np.ndarray, idle_class: np.ndarray, idle_at: np.ndarray, idle_ns: np.ndarray,
          idle_key: np.ndarray) -> Rows:
    """Rows of n windows from busy time (window, name, ns, key) and idle stretches (window, class, start, ns,
    key), each summed per (window, component) in the order given and ordered busy first, then idle, each by
    the key of its first row."""
    width = n_names + len(IDLE_BY_CLASS)
    w_all = np.concatenate((win, idle_win))
    name = np.concatenate((label, n_names + idle_class))
    keys = w_all * width + name
    uniq, first_row, inverse = np.unique(keys, return_index=True, return_inverse=True)
    sums = np.bincount(inverse, weights=np.concatenate((ns, idle_ns.astype(np.float64))), minlength=len(uniq))
    group = (uniq % width >= n_names).astype(np.int64)
    first_key = np.concatenate((key, idle_key))[first_row]
    order = np.lexsort((first_key, group, uniq // width))
    uniq = uniq[order]
    host = idle_class == 0
    host_max = np.zeros(n, np.int64)
    np.maximum.at(host_max, idle_win[host], idle_ns[host])
    long = host & (idle_ns >= LONG_HOST_GAP_NS)
    host_long = np.bincount(idle_win[long], weights=idle_ns[long].astype(np.float64), minlength=n)
    long_order = np.lexsort((idle_key[long], idle_win[long]))
    return Rows(uniq // width, uniq % width, sums[order], np.bincount(idle_win, minlength=n).astype(np.int64),
                 host_max, host_long.astype(np.int64), idle_win[long][long_order], idle_at[long][long_order],
                 idle_ns[long][long_order])


def _intervals(work: Work, w0: np.ndarray, w1: np.ndarray, lo: np.ndarray, hi: np.ndarray,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each window's intervals: (window, position in it, index into work, start and end clipped to it)."""
    count = hi - lo
    total = int(count.sum())
    step = np.repeat(np.arange(len(w0)), count)  # window of each interval
    first = np.repeat(np.cumsum(count) - count, count)  # position of its window's first interval
    pos = np.arange(total) - first
    idx = np.repeat(lo, count) + pos
    return step, pos, idx, np.maximum(work.start[idx], w0[step]), np.minimum(work.end[idx], w1[step])


def _tail_class(work: Work, hi: np.ndarray, t_end: np.ndarray, host_range: np.ndarray) -> np.ndarray:
    """The idle class of a window's end after t_end: the next work's launch call, else host time when the
    window is a host range (`split`'s `tail`)."""
    nxt = np.minimum(hi, len(work.start) - 1)
    return np.where(hi >= len(work.start), np.where(host_range, 0, 2), _idle_class(work.launch[nxt], t_end))


def _sweep_rows(work: Work, w0: np.ndarray, w1: np.ndarray, host_range: np.ndarray, lo: np.ndarray,
                hi: np.ndarray) -> Rows:
    """`split`'s sweep of windows whose work overlaps itself, on arrays: the events (interval starts and ends,
    ends first at a time, then by interval) in `split`'s order; between two event times each active interval
    gets the time over the number active, summed per component in time order as `split` adds it."""
    n = len(w0)
    n_names = len(work.names)
    step, pos, idx, s, e = _intervals(work, w0, w1, lo, hi)
    keep = e > s
    step, pos, idx, s, e = step[keep], pos[keep], idx[keep], s[keep], e[keep]
    m = len(step)
    ev_win = np.concatenate((step, step))
    ev_time = np.concatenate((s, e))
    ev_kind = np.concatenate((np.ones(m, np.int64), np.full(m, -1, np.int64)))
    ev_pos = np.concatenate((pos, pos))
    ev_idx = np.concatenate((idx, idx))
    order = np.lexsort((ev_pos, ev_kind, ev_time, ev_win))
    ev_win, ev_time, ev_kind, ev_idx = ev_win[order], ev_time[order], ev_kind[order], ev_idx[order]
    ev_comp = work.comp[ev_idx].astype(np.int64)
    k = len(ev_win)
    active = np.zeros((k, max(n_names, 1)), np.int32)
    active[np.arange(k), ev_comp] = ev_kind
    np.cumsum(active, axis=0, out=active)  # every window's counts return to 0 at its last event
    n_active = np.cumsum(ev_kind)
    # Segments: from an event to the next event of its window at a later time.
    nxt_same = np.zeros(k, bool)
    nxt_same[:-1] = ev_win[1:] == ev_win[:-1]
    dt = np.zeros(k, np.int64)
    dt[:-1] = ev_time[1:] - ev_time[:-1]
    seg = nxt_same & (dt > 0)
    busy = seg & (n_active > 0)
    bj = np.flatnonzero(busy)
    share = dt[bj].astype(np.float64) / n_active[bj]
    rows, comps = np.nonzero(active[bj] > 0)  # row-major: a segment's components together, segments in order
    contrib = share[rows] * active[bj[rows], comps]
    # Each component's place: its first start event in the window.
    starts = np.flatnonzero(ev_kind == 1)
    # Idle: between events with nothing active (classed by the launch of the work that ends it), before the
    # first event, after the last.
    ij = np.flatnonzero(seg & (n_active == 0))
    first_ev = np.flatnonzero(np.concatenate(([True], ev_win[1:] != ev_win[:-1])))
    last_ev = np.flatnonzero(np.concatenate((ev_win[1:] != ev_win[:-1], [True])))
    head = first_ev[ev_time[first_ev] > w0[ev_win[first_ev]]]
    t_end = np.full(n, 0, np.int64)
    t_end[ev_win[last_ev]] = ev_time[last_ev]
    tail = np.flatnonzero(t_end < w1)
    idle_win = np.concatenate((ev_win[head], ev_win[ij], tail))
    idle_at = np.concatenate((w0[ev_win[head]], ev_time[ij], t_end[tail]))
    idle_ns = np.concatenate((ev_time[head] - w0[ev_win[head]], dt[ij], w1[tail] - t_end[tail]))
    idle_class = np.concatenate((_idle_class(work.launch[ev_idx[head]], w0[ev_win[head]]),
                                 _idle_class(work.launch[ev_idx[ij + 1]], ev_time[ij]),
                                 _tail_class(work, hi[tail], t_end[tail], host_range[tail])))
    idle_key = np.concatenate((np.full(len(head), -1, np.int64), ij, np.full(len(tail), k, np.int64)))
    # Busy rows keyed by the component's first start event: put that key on every row of the component.
    first_start = np.full((n, max(n_names, 1)), k, np.int64)
    np.minimum.at(first_start, (ev_win[starts], ev_comp[starts]), starts)
    b_win = ev_win[bj[rows]]
    return _rows(n, n_names, b_win, comps.astype(np.int64), contrib, first_start[b_win, comps],
                 idle_win, idle_class, idle_at, idle_ns, idle_key)


def _fast_rows(work: Work, w0: np.ndarray, w1: np.ndarray, host_range: np.ndarray, lo: np.ndarray,
               hi: np.ndarray) -> Rows:
    """`split` of windows whose intervals do not overlap (their ends rise with their starts), on arrays."""
    n = len(w0)
    count = hi - lo
    step, pos, idx, s, e = _intervals(work, w0, w1, lo, hi)
    # The sweep's clock before each interval: the window start, then the previous interval's (clipped) end.
    t = np.where(pos == 0, w0[step], np.roll(e, 1)) if len(step) else e
    t = np.maximum(t, w0[step])
    # The window's end: idle after its last interval (or all of it), classed by the next work's launch call.
    last_end = np.full(n, 0, np.int64)
    has = count > 0
    last_end[has] = e[np.cumsum(count)[has] - 1]
    t_end = np.where(has, np.maximum(last_end, w0), w0)
    tail = np.flatnonzero(t_end < w1)
    bi, gi = np.flatnonzero(e > s), np.flatnonzero(s > t)
    return _rows(n, len(work.names), step[bi], work.comp[idx[bi]].astype(np.int64), (e - s)[bi].astype(np.float64),
                 pos[bi], np.concatenate((step[gi], tail)),
                 np.concatenate((_idle_class(work.launch[idx[gi]], t[gi]),
                                 _tail_class(work, hi[tail], t_end[tail], host_range[tail]))),
                 np.concatenate((t[gi], t_end[tail])), np.concatenate(((s - t)[gi], w1[tail] - t_end[tail])),
                 np.concatenate((pos[gi], count[tail])))


def split_rows(work: Work, w0: np.ndarray, w1: np.ndarray, host_range: np.ndarray,
                pairs: np.ndarray | None = None) -> Rows:
    """`split` of many windows of one device at once, as Rows: windows whose GPU work does not overlap itself
    (one stream at a time: nearly every step) in one pass over their intervals, the others through the sweep on
    arrays, FAST_CHUNK windows at a time (the arrays hold a row per interval, or per event). `pairs`:
    `overlap_pairs(work)`, when already known."""
    lo = np.searchsorted(work.reach, w0, side="right")
    hi = np.maximum(np.searchsorted(work.start, w1, side="left"), lo)
    count = hi - lo
    if pairs is None:
        pairs = overlap_pairs(work)
    overlapping = (count > 1) & (pairs[np.maximum(hi - 1, 0)] - pairs[lo] > 0)
    parts = []
    for make, which in ((_sweep_rows, np.flatnonzero(overlapping)), (_fast_rows, np.flatnonzero(~overlapping))):
        for at in range(0, len(which), FAST_CHUNK):
            part = which[at:at + FAST_CHUNK]
            parts.append((part, make(work, w0[part], w1[part], host_range[part], lo[part], hi[part])))
    return _concat_rows(parts, len(w0))


def split_many(work: Work, w0: np.ndarray, w1: np.ndarray, host_range: np.ndarray,
                pairs: np.ndarray | None = None) -> list[Split]:
    """`split_rows` as a Split per window (what `split` gives, summed; tests/test_breakdown.py holds the two
    together)."""
    r = split_rows(work, w0, w1, host_range, pairs)
    labels = work.names + list(IDLE_BY_CLASS)
    out = [Split({}, int(a), int(b), int(c)) for a, b, c in zip(r.idle_n.tolist(), r.host_max.tolist(),
                                                                  r.host_long.tolist(), strict=True)]
    for w, lab, v in zip(r.win.tolist(), r.label.tolist(), r.value.tolist(), strict=True):
        out[w].parts[labels[lab]] = v
    for w, a, v in zip(r.long_win.tolist(), r.long_at.tolist(), r.long_ns.tolist(), strict=True):
        out[w].long_host.append((a, v))
    return out


def round_rows(win: np.ndarray, value: np.ndarray, total: np.ndarray) -> np.ndarray:
    """`round_to` of many windows at once: rows (window, ns as float), ordered by window, each window's rows in
    its components' order; `total`: each window's length. Each row's integer ns (zeros kept), adding up to the
    window's total: the floors, and one more ns for the rows with the largest remainders (ties in row order)."""
    m = len(win)
    firsts = np.searchsorted(win, np.arange(len(total)))  # each window's first row
    floors = np.floor(value)
    ints_ = floors.astype(np.int64)
    summed = np.zeros(len(total), np.int64)
    np.add.at(summed, win, ints_)
    order = np.lexsort((np.arange(m), -(value - floors), win))
    rank = np.empty(m, np.int64)
    rank[order] = np.arange(m) - firsts[win[order]]
    out: np.ndarray = ints_ + (rank < (total - summed)[win])
    return out

