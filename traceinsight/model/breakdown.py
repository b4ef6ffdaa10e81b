"""Where each step's time went: its wall time split into GPU work by component and GPU idle by reason.

A step's *window* is what the engine waits for: from the start of its range on the host (the ProfilerStep /
NVTX / annotation range that groups it) to the end of its last GPU kernel, or the end of the range if the host
stays in the step longer. When the GPU is still busy with the previous step as the range opens, the window
starts where the previous step's window ends, so the windows of a device never overlap and their components
add up to the time the steps took: a slow step is not charged again to the step queued behind it. Steps with
no host range (GPU-side annotations, one launch per step) have their GPU span as window.

Every nanosecond of the window goes to exactly one component:
- GPU busy, by what ran: `attention` (decode attention launches with their merge/combine and prepare kernels),
  `prefill` (attention launches that ran prefill or mixed prefill + decode rows, with theirs), and every other
  kernel family by its label (`gemm`, `norm`, `elementwise`, `communication`, `memory` (copies and sets
  included), `moe`, `other`, ...). Where kernels overlap (several streams), the time is shared equally.
- GPU idle: `idle-host` when the next work's launch call started after the GPU went idle (the GPU waited for
  the host: Python, scheduling, a stall, launch overhead), also idle at the end of a window while the host is
  still inside the step; `idle-wait` when the next work had been launched before the GPU went idle (it waited
  on a synchronisation, a copy, another stream or an event); `idle-unknown` when the trace does not link
  kernels to their launch calls.

Whether idle host time came in a few long stretches (a stall) or many short ones (launch-bound) is kept too:
`host_gap_max_ns` and `host_long_ns` (idle-host time in stretches of at least LONG_HOST_GAP_NS).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from traceinsight.ingest.store import TraceDB
from traceinsight.model.phases import PREFILL_PHASES
from traceinsight.model.steps import ATTENTION, MERGE, PREPARE, Step
from traceinsight.queries import sql

# Component names (besides kernel families).
PREFILL = "prefill"
IDLE_HOST = "idle-host"
IDLE_WAIT = "idle-wait"
IDLE_UNKNOWN = "idle-unknown"
IDLE = (IDLE_HOST, IDLE_WAIT, IDLE_UNKNOWN)
# Families whose kernels count as attention time (the kernels that belong to an attention launch).
ATTENTION_FAMILIES = (ATTENTION, MERGE, PREPARE)
# An idle-host stretch at least this long is a stall of the host, not launch overhead (ns).
LONG_HOST_GAP_NS = 100_000
# Long idle-host stretches kept per step (with their times, for naming what the host did meanwhile).
MAX_HOST_GAPS = 3


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """One step's window and where its time went (ns).

    start_ns / end_ns: the window (see the module docstring); source: 'cpu-range' | 'gpu-range' | 'gpu-span'
    (what the window was taken from); components: ns per component, adding up to wall_ns; host_range_ns: the
    step's range on the host (None without one); host_gap_max_ns: the longest stretch the GPU waited for the
    host; host_long_ns: idle-host time in stretches of at least LONG_HOST_GAP_NS; idle_stretches: how many
    separate idle stretches the window holds; host_gaps: the MAX_HOST_GAPS longest idle-host stretches of at
    least LONG_HOST_GAP_NS as (start, end).
    """

    start_ns: int
    end_ns: int
    source: str
    components: dict[str, int] = field(default_factory=dict)
    host_range_ns: int | None = None
    host_gap_max_ns: int = 0
    host_long_ns: int = 0
    idle_stretches: int = 0
    host_gaps: tuple[tuple[int, int], ...] = ()  # the longest idle-host stretches, (start, end) ns, longest first

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def gpu_busy_ns(self) -> int:
        return sum(v for k, v in self.components.items() if k not in IDLE)

    @property
    def idle_ns(self) -> int:
        return sum(self.components.get(k, 0) for k in IDLE)

    def get(self, component: str) -> int:
        return self.components.get(component, 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "wall_ns": self.wall_ns,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "source": self.source,
            "gpu_busy_ns": self.gpu_busy_ns,
            "idle_ns": self.idle_ns,
            "components": dict(sorted(self.components.items(), key=lambda kv: -kv[1])),
            "host_range_ns": self.host_range_ns,
            "host_gap_max_ns": self.host_gap_max_ns,
            "host_long_ns": self.host_long_ns,
            "idle_stretches": self.idle_stretches,
            "host_gaps": [list(g) for g in self.host_gaps],
        }


def component_of_family(family: str | None) -> str:
    """The component a kernel of this family counts in when it belongs to no attention launch."""
    if family is None:
        return "other"
    return ATTENTION if family in ATTENTION_FAMILIES else family


@dataclass
class _Work:
    """All GPU work of one device, sorted by start, with each interval's component code (sequences: Python lists
    in the pipeline, where each step slices a few of them)."""

    start: Sequence[int]
    end: Sequence[int]
    launch: Sequence[int]  # -1: unknown
    comp: Sequence[int]  # index into names
    reach: Sequence[int]  # running maximum of end
    names: list[str]


def prefill_kernels(steps: Iterable[Step]) -> set[int]:
    """Kernel ids that are prefill work whatever their family: the attention, merge and prepare kernels of
    attention launches that ran prefill (or prefill mixed with decode rows)."""
    return {k.kernel_id for s in steps for x in s.launches if x.phase in PREFILL_PHASES
            for k in (x.attention, *x.merges, *x.prepares)}


def _gpu_work(db: TraceDB, trace_id: int, steps: list[Step]) -> dict[Any, _Work]:
    table = db.con.sql(sql("step_gpu_work"), params={"trace": trace_id}).to_arrow_table()
    if table.num_rows == 0:
        return {}
    kid = table.column("kernel_id").to_numpy(zero_copy_only=False)
    family = table.column("family").to_pylist()
    device = table.column("device_id").to_pylist()
    start = table.column("start_ns").to_numpy().astype(np.int64)
    end = table.column("end_ns").to_numpy().astype(np.int64)
    launch_col = table.column("launch_ns")
    launch = launch_col.fill_null(-1).to_numpy().astype(np.int64) if launch_col.null_count else \
        launch_col.to_numpy().astype(np.int64)
    special = prefill_kernels(steps)
    names: list[str] = []
    code: dict[str, int] = {}

    def cid(name: str) -> int:
        if name not in code:
            code[name] = len(names)
            names.append(name)
        return code[name]

    by_family = {f: cid(component_of_family(f)) for f in set(family)}
    comp = np.fromiter((by_family[f] for f in family), np.int64, len(family))
    if special:
        prefill = cid(PREFILL)
        valid = ~np.isnan(kid) if kid.dtype.kind == "f" else np.ones(len(kid), bool)
        ids = np.where(valid, kid, -1).astype(np.int64)
        comp[np.isin(ids, np.fromiter(special, np.int64, len(special)))] = prefill
    dev = np.array([-1 if d is None else d for d in device], np.int64)
    out: dict[Any, _Work] = {}
    for d in np.unique(dev):
        m = dev == d
        s_, e_ = start[m], end[m]
        out[int(d) if d >= 0 else None] = _Work(s_.tolist(), e_.tolist(), launch[m].tolist(), comp[m].tolist(),
                                                np.maximum.accumulate(e_).tolist(), names)
    return out


def _step_device(step: Step) -> Any:
    """The GPU of the step's attention launches (the most common one when they differ)."""
    if step.launches:
        first = step.launches[0].attention.device_id
        if all(x.attention.device_id == first for x in step.launches):
            return first
    devices = Counter(x.attention.device_id for x in step.launches)
    return devices.most_common(1)[0][0] if devices else None


def _windows(steps: Iterable[Step]) -> list[tuple[Step, int, int, str]]:
    """(step, window start, window end, source) per step; windows of one device never overlap."""
    by_device: dict[Any, list[Step]] = defaultdict(list)
    for s in steps:
        by_device[_step_device(s)].append(s)
    out = []
    for group in by_device.values():
        group.sort(key=lambda s: (s.range_start_ns if s.range_side is not None else s.start_ns, s.index))
        prev_end: int | None = None
        for s in group:
            if s.range_side is not None and s.range_start_ns is not None and s.range_end_ns is not None:
                w0 = s.range_start_ns if s.range_side == "cpu" or not s.kernel_count else min(s.range_start_ns,
                                                                                          s.start_ns)
                w1 = max(s.range_end_ns, s.end_ns) if s.kernel_count else s.range_end_ns
                source = "cpu-range" if s.range_side == "cpu" else "gpu-range"
            else:
                w0, w1, source = s.start_ns, s.end_ns, "gpu-span"
            if prev_end is not None and prev_end > w0:
                # The GPU was still on the previous step: this step's time starts when that ends (the first
                # kernel may start a little earlier: programmatic dependent launch overlaps kernels by ~0.2 us).
                # Only a step whose GPU work lies wholly inside the previous window (steps running concurrently
                # on several streams) keeps its own start, and its window overlaps the previous one.
                w0 = prev_end if not s.kernel_count or prev_end < s.end_ns else min(prev_end, s.start_ns)
            w1 = max(w1, w0)
            out.append((s, w0, w1, source))
            prev_end = w1 if prev_end is None else max(prev_end, w1)
    return out


def _classify(launch: int, idle_from: int) -> str:
    if launch < 0:
        return IDLE_UNKNOWN
    return IDLE_HOST if launch >= idle_from else IDLE_WAIT


def _split(work: _Work, w0: int, w1: int, host_range: bool = False) -> tuple[dict[str, float],
                                                                              list[tuple[str, int, int]]]:
    """(busy ns per component, idle stretches as (component, start, ns)) of [w0, w1) on one device.
    `host_range`: the window comes from a host range, so idle time at its end with no GPU work after it at all
    is the host's (it was still inside the step)."""
    lo = bisect.bisect_right(work.reach, w0)  # first interval ending after w0
    hi = bisect.bisect_left(work.start, w1)  # intervals starting before w1
    starts = list(work.start[lo:hi])
    ends = list(work.end[lo:hi])
    comps = list(work.comp[lo:hi])
    launches = list(work.launch[lo:hi])
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


def _round_to(parts: dict[str, float], total: int) -> dict[str, int]:
    """Integer ns per component adding up to exactly `total` (largest remainders get the leftover ns)."""
    floors = {k: int(v) for k, v in parts.items()}
    left = total - sum(floors.values())
    if left > 0:
        for k in sorted(parts, key=lambda k: -(parts[k] - floors[k]))[:left]:
            floors[k] += 1
    return {k: v for k, v in floors.items() if v > 0}


def breakdowns(db: TraceDB, trace_id: int, steps: list[Step]) -> dict[int, StepBreakdown]:
    """The breakdown of every step (by step index); each step's `breakdown` is set too."""
    if not steps:
        return {}
    work = _gpu_work(db, trace_id, steps)
    out: dict[int, StepBreakdown] = {}
    for s, w0, w1, source in _windows(steps):
        dev = _step_device(s)
        wk = work.get(dev) if dev in work else (next(iter(work.values())) if len(work) == 1 else None)
        parts: dict[str, float] = {}
        idle: list[tuple[str, int, int]] = []
        if wk is not None and w1 > w0:
            busy, idle = _split(wk, w0, w1, host_range=source == "cpu-range")
            parts = dict(busy)
            for comp, _, ns in idle:
                parts[comp] = parts.get(comp, 0.0) + ns
        elif w1 > w0:
            parts = {IDLE_UNKNOWN: float(w1 - w0)}
        host = [ns for comp, _, ns in idle if comp == IDLE_HOST]
        long_gaps = sorted(((t, t + ns) for comp, t, ns in idle if comp == IDLE_HOST and ns >= LONG_HOST_GAP_NS),
                           key=lambda g: g[0] - g[1])[:MAX_HOST_GAPS]
        b = StepBreakdown(
            start_ns=w0,
            end_ns=w1,
            source=source,
            components=_round_to(parts, w1 - w0),
            host_range_ns=(s.range_end_ns - s.range_start_ns
                           if s.range_side == "cpu" and s.range_start_ns is not None and s.range_end_ns is not None
                           else None),
            host_gap_max_ns=max(host, default=0),
            host_long_ns=sum(ns for ns in host if ns >= LONG_HOST_GAP_NS),
            idle_stretches=len(idle),
            host_gaps=tuple(long_gaps),
        )
        s.breakdown = b
        out[s.index] = b
    return out
