"""The split of one window into components, a window at a time: the definition `window_split` computes on arrays
(tests/test_breakdown.py holds the two together)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from traceinsight.components import IDLE_HOST, IDLE_UNKNOWN, IDLE_WAIT
from traceinsight.model.gpu_work import Work

# An idle-host stretch at least this long is a stall of the host, not launch overhead (ns).
LONG_HOST_GAP_NS = 100_000


def _classify(launch: int, idle_from: int) -> str:
    if launch < 0:
        return IDLE_UNKNOWN
    return IDLE_HOST if launch >= idle_from else IDLE_WAIT


def split(work: Work, w0: int, w1: int, host_range: bool = False) -> tuple[dict[str, float],
                                                                              list[tuple[str, int, int]]]:
    """(busy ns per component, idle stretches as (component, start, ns)) of [w0, w1) on one device.
    `host_range`: the window comes from a host range, so idle time at its end with no GPU work after it at all
    is the host's (it was still inside the step)."""
    lo = int(np.searchsorted(work.reach, w0, side="right"))  # first interval ending after w0
    hi = int(np.searchsorted(work.start, w1, side="left"))  # intervals starting before w1
    starts = work.start[lo:hi].tolist()
    ends = work.end[lo:hi].tolist()
    comps = work.comp[lo:hi].tolist()
    launches = work.launch[lo:hi].tolist()
    names = work.names
    busy: dict[str, float] = defaultdict(float)
    idle: list[tuple[str, int, int]] = []
    nxt = hi if hi < len(work.start) else None

    def tail(t: int) -> str:
        if nxt is None:
            return IDLE_HOST if host_range else IDLE_UNKNOWN
        return _classify(int(work.launch[nxt]), t)

    overlapping = any(starts[i + 1] < ends[i] for i in range(len(starts) - 1)) if len(starts) > 1 else False
    if not overlapping:
        t = w0
        for s, e, c, la in zip(starts, ends, comps, launches, strict=True):
            s = max(s, w0)
            e = min(e, w1)
            if s > t:
                idle.append((_classify(la, t), t, s - t))
            if e > s:
                busy[names[c]] += e - s
            t = max(t, e)
        if t < w1:
            idle.append((tail(t), t, w1 - t))
        return busy, idle
    # Overlapping work (several streams): sweep over the interval ends; time shared among what is active.
    events: list[tuple[int, int, int]] = []  # (time, +1 start / -1 end, index)
    for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
        s, e = max(s, w0), min(e, w1)
        if e > s:
            events.append((s, 1, i))
            events.append((e, -1, i))
    events.sort(key=lambda x: (x[0], x[1]))
    active: Counter[int] = Counter()
    n_active = 0
    t = w0
    for time, kind, i in events:
        if time > t:
            if n_active:
                share = (time - t) / n_active
                for c, n in active.items():
                    if n:
                        busy[names[c]] += share * n
            else:
                idle.append((_classify(launches[i] if kind == 1 else -1, t), t, time - t))
            t = time
        if kind == 1:
            active[comps[i]] += 1
            n_active += 1
        else:
            active[comps[i]] -= 1
            n_active -= 1
    if t < w1:
        idle.append((tail(t), t, w1 - t))
    return busy, idle


def round_to(parts: dict[str, float], total: int) -> dict[str, int]:
    """Integer ns per component adding up to exactly `total` (largest remainders get the leftover ns)."""
    floors = {k: int(v) for k, v in parts.items()}
    left = total - sum(floors.values())
    if left > 0:
        for k in sorted(parts, key=lambda k: -(parts[k] - floors[k]))[:left]:
            floors[k] += 1
    return {k: v for k, v in floors.items() if v > 0}



@dataclass
class Split:
    """One step's `split`, summed: ns per component (busy components in the order they first ran, then idle
    ones in the order they first occurred, as `split` builds them) and its idle-host stretches."""

    parts: dict[str, float]
    idle_stretches: int = 0
    host_max_ns: int = 0  # the longest idle-host stretch
    host_long_ns: int = 0  # idle-host time in stretches of at least LONG_HOST_GAP_NS
    long_host: list[tuple[int, int]] = field(default_factory=list)  # (start, ns) of those stretches, in time order


def from_split(busy: dict[str, float], idle: list[tuple[str, int, int]]) -> Split:
    parts = dict(busy)
    for comp, _, ns in idle:
        parts[comp] = parts.get(comp, 0.0) + ns
    host = [(t, ns) for comp, t, ns in idle if comp == IDLE_HOST]
    long_host = [(t, ns) for t, ns in host if ns >= LONG_HOST_GAP_NS]
    return Split(parts, len(idle), max((ns for _, ns in host), default=0), sum(ns for _, ns in long_host), long_host)

