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

from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from traceinsight.components import IDLE, IDLE_HOST, IDLE_UNKNOWN, IDLE_WAIT, PREFILL
from traceinsight.ingest.arrow_numpy import encode, ints, sorted_distinct
from traceinsight.ingest.store import TraceDB
from traceinsight.model.phases import PREFILL_PHASES
from traceinsight.model.steps import ATTENTION, MERGE, PREPARE, Step
from traceinsight.queries import sql

# Families whose kernels count as attention time (the kernels that belong to an attention launch).
ATTENTION_FAMILIES = (ATTENTION, MERGE, PREPARE)
# An idle-host stretch at least this long is a stall of the host, not launch overhead (ns).
LONG_HOST_GAP_NS = 100_000
# Windows split together by `_fast_rows` or `_sweep_rows`: their temporary arrays hold one row per interval (or
# event) of the windows, so all 229K windows of the 1M-kernel export at once (2.6M intervals) took 0.3 GB more.
FAST_CHUNK = 16_384
# Windows split and made StepBreakdowns at a time (`breakdowns`).
SPLIT_CHUNK = 65_536
# Rows of step_gpu_work.sql read at a time (as Arrow record batches).
GPU_WORK_BATCH_ROWS = 1 << 20
# Long idle-host stretches kept per step (with their times, for naming what the host did meanwhile).
MAX_HOST_GAPS = 3


# One tuple per distinct sequence of component names, shared by the breakdowns that have it.
_COMPONENT_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}
# StepBreakdown's numbers before its components' (start, end, host range, longest host gap, long host time, idle
# stretches), and the host range's value for None.
_FIXED = 6
_NO_RANGE = -(2**63)


class StepBreakdown:
    """One step's window and where its time went (ns).

    start_ns / end_ns: the window (see the module docstring); source: 'cpu-range' | 'gpu-range' | 'gpu-span'
    (what the window was taken from); components: ns per component, adding up to wall_ns; host_range_ns: the
    step's range on the host (None without one); host_gap_max_ns: the longest stretch the GPU waited for the
    host; host_long_ns: idle-host time in stretches of at least LONG_HOST_GAP_NS; idle_stretches: how many
    separate idle stretches the window holds; host_gaps: the MAX_HOST_GAPS longest idle-host stretches of at
    least LONG_HOST_GAP_NS as (start, end).

    Its numbers (window, host range, longest host gap, long host time, idle stretches, then the components' ns)
    are held in an int64 array, at `_at` in one shared by every step of a trace when `breakdowns` made it, beside
    a shared tuple of the components' names: an object per field and a dict of ints was 0.4 KB a step, and a
    long trace has 10^6 steps. `components` gives them as a dict, in the order given.
    """

    __slots__ = ("_names", "_data", "_at", "source", "host_gaps")

    source: str
    host_gaps: tuple[tuple[int, int], ...]  # the longest idle-host stretches, (start, end) ns, longest first

    def __init__(self, start_ns: int, end_ns: int, source: str, components: dict[str, int] | None = None,
                 host_range_ns: int | None = None, host_gap_max_ns: int = 0, host_long_ns: int = 0,
                 idle_stretches: int = 0, host_gaps: tuple[tuple[int, int], ...] = (),
                 arena: array[int] | None = None) -> None:
        """`arena`: the array to append the numbers to (shared by the steps of a trace); a new one if None."""
        components = components or {}
        names = tuple(components)
        self._names = _COMPONENT_NAMES.setdefault(names, names)
        data = arena if arena is not None else array("q")
        self._at = len(data)
        data.extend((start_ns, end_ns, _NO_RANGE if host_range_ns is None else host_range_ns, host_gap_max_ns,
                     host_long_ns, idle_stretches))
        data.extend(components.values())
        self._data = data
        self.source = source
        self.host_gaps = host_gaps

    @classmethod
    def _of(cls, names: tuple[str, ...], data: array[int], at: int, source: str,
            host_gaps: tuple[tuple[int, int], ...]) -> StepBreakdown:
        """A breakdown whose numbers are already at `at` in `data` (`breakdowns` writes them there at once)."""
        b = cls.__new__(cls)
        b._names, b._data, b._at, b.source, b.host_gaps = names, data, at, source, host_gaps
        return b

    @property
    def start_ns(self) -> int:
        return self._data[self._at]

    @property
    def end_ns(self) -> int:
        return self._data[self._at + 1]

    @property
    def host_range_ns(self) -> int | None:
        v = self._data[self._at + 2]
        return None if v == _NO_RANGE else v

    @property
    def host_gap_max_ns(self) -> int:
        return self._data[self._at + 3]

    @property
    def host_long_ns(self) -> int:
        return self._data[self._at + 4]

    @property
    def idle_stretches(self) -> int:
        return self._data[self._at + 5]

    def _values(self) -> array[int]:
        at = self._at + _FIXED
        return self._data[at:at + len(self._names)]

    @property
    def component_names(self) -> tuple[str, ...]:
        """The components' names in order: one tuple shared by the breakdowns with the same names."""
        return self._names

    def component_ns(self) -> array[int]:
        """The components' ns in the order of `component_names` (a new array; no dict per step)."""
        return self._values()

    @property
    def components(self) -> dict[str, int]:
        """ns per component (a new dict)."""
        return dict(zip(self._names, self._values(), strict=True))

    def _key(self) -> tuple[Any, ...]:
        return (self.source, self._names, tuple(self._data[self._at:self._at + _FIXED + len(self._names)]),
                self.host_gaps)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StepBreakdown) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"StepBreakdown(start_ns={self.start_ns}, end_ns={self.end_ns}, source={self.source!r}, "
                f"components={self.components!r}, host_range_ns={self.host_range_ns}, "
                f"host_gap_max_ns={self.host_gap_max_ns}, host_long_ns={self.host_long_ns}, "
                f"idle_stretches={self.idle_stretches}, host_gaps={self.host_gaps!r})")

    @property
    def wall_ns(self) -> int:
        return self._data[self._at + 1] - self._data[self._at]

    @property
    def gpu_busy_ns(self) -> int:
        return sum(v for k, v in zip(self._names, self._values(), strict=True) if k not in IDLE)

    @property
    def idle_ns(self) -> int:
        return sum(v for k, v in zip(self._names, self._values(), strict=True) if k in IDLE)

    def get(self, component: str) -> int:
        try:
            return self._data[self._at + _FIXED + self._names.index(component)]
        except ValueError:
            return 0

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


def components_ns(bs: Sequence[StepBreakdown]) -> np.ndarray:
    """Every breakdown's components' ns (`component_ns`), concatenated in order as int64: gathered at once from
    the array the breakdowns of a trace share (a slice per breakdown otherwise, as when they hold their own)."""
    n = len(bs)
    lengths = np.fromiter((len(b._names) for b in bs), np.int64, n)
    total = int(lengths.sum())
    arenas = {id(b._data): b._data for b in bs}
    if len(arenas) != 1 or not total:
        return np.fromiter((v for b in bs for v in b._data[b._at + _FIXED:b._at + _FIXED + len(b._names)]),
                           np.int64, total)
    (arena,) = arenas.values()
    firsts = np.fromiter((b._at for b in bs), np.int64, n) + _FIXED
    offsets = np.cumsum(lengths) - lengths  # where each breakdown's values start in the result
    index = np.repeat(firsts - offsets, lengths) + np.arange(total, dtype=np.int64)
    data = np.frombuffer(arena, np.int64)
    try:
        return data[index]  # a copy: the arena's buffer is released with `data`
    finally:
        del data


def component_of_family(family: str | None) -> str:
    """The component a kernel of this family counts in when it belongs to no attention launch."""
    if family is None:
        return "other"
    return ATTENTION if family in ATTENTION_FAMILIES else family


@dataclass
class _Work:
    """All GPU work of one device, sorted by start, with each interval's component code (int64 arrays)."""

    start: np.ndarray
    end: np.ndarray
    launch: np.ndarray  # -1: unknown
    comp: np.ndarray  # index into names
    reach: np.ndarray  # running maximum of end
    names: list[str]


def prefill_kernels(steps: Iterable[Step]) -> set[int]:
    """Kernel ids that are prefill work whatever their family: the attention, merge and prepare kernels of
    attention launches that ran prefill (or prefill mixed with decode rows)."""
    return {k.kernel_id for s in steps for x in s.launches if x.phase in PREFILL_PHASES
            for k in (x.attention, *x.merges, *x.prepares)}


def _gpu_work(db: TraceDB, trace_id: int, steps: list[Step]) -> dict[Any, _Work]:
    """step_gpu_work's rows as arrays per device, read in record batches of GPU_WORK_BATCH_ROWS: each interval
    costs four int64 and one int32 column (the 10M-kernel export has 26M intervals: 0.9 GB), never a Python
    object (a batch's families are numbered through its dictionary of distinct strings)."""
    special = prefill_kernels(steps)
    special_ids = np.fromiter(special, np.int64, len(special)) if special else None
    families: dict[str, int] = {}  # family -> its number, in the order the families first occur in the rows
    chunks: dict[str, list[np.ndarray]] = {c: [] for c in ("dev", "start", "end", "launch", "family")}
    result = db.con.sql(sql("step_gpu_work"), params={"trace": trace_id})
    for batch in db.stream(result, GPU_WORK_BATCH_ROWS):
        if not batch.num_rows:
            continue
        col = dict(zip(batch.schema.names, batch.columns, strict=True))
        words, index = encode(col["family"])  # family is NOT NULL (kernel_labels; 'memory')
        for j in np.sort(np.unique(index, return_index=True)[1]).tolist():
            families.setdefault(words[int(index[j])], len(families))
        number = np.array([families[w] for w in words], np.int32)[index]
        if special_ids is not None:
            number[np.isin(ints(col["kernel_id"], -1), special_ids)] = -1  # prefill work, whatever its family
        chunks["family"].append(number)
        for key, name in (("dev", "device_id"), ("start", "start_ns"), ("end", "end_ns"), ("launch", "launch_ns")):
            # A copy, not a view of the batch's buffer: a view kept the whole batch (its kernel ids and family
            # strings too: 0.5 GB at 10M kernels) alive until the columns were joined.
            chunks[key].append(np.array(ints(col[name], -1)))
    if not chunks["start"]:
        return {}
    names: list[str] = []
    code: dict[str, int] = {}

    def cid(name: str) -> int:
        if name not in code:
            code[name] = len(names)
            names.append(name)
        return code[name]

    # Component numbers: the families' in the order they first occur, then prefill.
    codes = [cid(component_of_family(f)) for f in families] + [cid(PREFILL) if special else 0]
    lookup = np.array(codes, np.int32)  # family number -1 (prefill) takes the last entry
    # One column at a time, each column's batches freed once joined: the peak is the arrays plus one column's
    # batches.
    cols: dict[str, np.ndarray] = {}
    for key in ("dev", "start", "end", "launch", "family"):
        joined = np.concatenate(chunks.pop(key))
        cols[key] = lookup[joined] if key == "family" else joined.astype(np.int64, copy=False)
        del joined
    dev = cols.pop("dev")
    devices = sorted_distinct(dev).tolist()
    out: dict[Any, _Work] = {}
    for d in devices:
        if len(devices) == 1:
            s_, e_, la, co = cols["start"], cols["end"], cols["launch"], cols["family"]
        else:
            m = dev == d
            s_, e_, la, co = cols["start"][m], cols["end"][m], cols["launch"][m], cols["family"][m]
        out[d if d >= 0 else None] = _Work(s_, e_, la, co, np.maximum.accumulate(e_), names)
    return out


def _step_device(step: Step) -> Any:
    """The GPU of the step's attention launches (the most common one when they differ)."""
    if step.launches:
        first = step.launches[0].attention.device_id
        if all(x.attention.device_id == first for x in step.launches):
            return first
    devices = Counter(x.attention.device_id for x in step.launches)
    return devices.most_common(1)[0][0] if devices else None


def _windows(steps: Iterable[Step], devices: Mapping[int, Any] | Sequence[Any] | None = None,
             ) -> list[tuple[Step, int, int, str]]:
    """(step, window start, window end, source) per step; windows of one device never overlap. `devices`: each
    step's device by index (`_step_device`), when already known."""
    ordered, w0, w1 = _window_arrays(list(steps), devices)
    return [(s, a, b, "gpu-span" if r is None else "cpu-range" if r else "gpu-range")
            for s, a, b, r in zip(ordered, w0.tolist(), w1.tolist(), _ranged(ordered), strict=True)]


def _ranged(steps: list[Step]) -> list[bool | None]:
    """Per step: None without a whole range, else whether it is a CPU range."""
    return [None if s.range_side is None or s.range_start_ns is None or s.range_end_ns is None
            else s.range_side == "cpu" for s in steps]


def _window_arrays(steps: list[Step], devices: Mapping[int, Any] | Sequence[Any] | None,
                   ) -> tuple[list[Step], np.ndarray, np.ndarray]:
    """The steps by device (in the order the devices first occur), each device's by range start (or start) and
    index, with their windows' starts and ends, on arrays: a step's window starts
    no earlier than the end of every window before it on its device (unless its own work lies inside that), and
    that end is the running maximum of the windows' own starts and ends."""
    n = len(steps)
    code: dict[Any, int] = {}
    dev = np.fromiter((code.setdefault(devices[s.index] if devices is not None else _step_device(s), len(code))
                       for s in steps), np.int64, n)
    ranged = _ranged(steps)
    has = np.fromiter((r is not None for r in ranged), bool, n)
    cpu = np.fromiter((r is True for r in ranged), bool, n)
    st = np.fromiter((s.start_ns for s in steps), np.int64, n)
    en = np.fromiter((s.end_ns for s in steps), np.int64, n)
    kc = np.fromiter((s.kernel_count for s in steps), np.int64, n) > 0
    rs = np.fromiter((s.range_start_ns if r is not None else 0 for s, r in zip(steps, ranged, strict=True)),
                     np.int64, n)
    re_ = np.fromiter((s.range_end_ns if r is not None else 0 for s, r in zip(steps, ranged, strict=True)),
                      np.int64, n)
    key = np.fromiter((s.range_start_ns if s.range_side is not None else s.start_ns for s in steps), np.int64, n)
    index = np.fromiter((s.index for s in steps), np.int64, n)
    order = np.lexsort((index, key, dev))
    dev, st, en, rs, re_ = dev[order], st[order], en[order], rs[order], re_[order]
    has, cpu, kc = has[order], cpu[order], kc[order]
    w0 = np.where(has, np.where(cpu | ~kc, rs, np.minimum(rs, st)), st)
    w1 = np.where(has, np.where(kc, np.maximum(re_, en), re_), en)
    reach = np.maximum(w0, w1)
    prev = np.empty(n, np.int64)
    first = np.ones(n, bool)
    for d in range(len(code)):
        at = np.flatnonzero(dev == d)
        run = np.maximum.accumulate(reach[at])
        prev[at[1:]] = run[:-1]
        first[at[1:]] = False
    late = ~first & (prev > w0)
    w0 = np.where(late, np.where(~kc | (prev < en), prev, np.minimum(prev, st)), w0)
    w1 = np.maximum(w1, w0)
    return [steps[i] for i in order.tolist()], w0, w1


def _classify(launch: int, idle_from: int) -> str:
    if launch < 0:
        return IDLE_UNKNOWN
    return IDLE_HOST if launch >= idle_from else IDLE_WAIT


def _split(work: _Work, w0: int, w1: int, host_range: bool = False) -> tuple[dict[str, float],
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


def _round_to(parts: dict[str, float], total: int) -> dict[str, int]:
    """Integer ns per component adding up to exactly `total` (largest remainders get the leftover ns)."""
    floors = {k: int(v) for k, v in parts.items()}
    left = total - sum(floors.values())
    if left > 0:
        for k in sorted(parts, key=lambda k: -(parts[k] - floors[k]))[:left]:
            floors[k] += 1
    return {k: v for k, v in floors.items() if v > 0}


def _idle_class(launch: np.ndarray, idle_from: np.ndarray) -> np.ndarray:
    """`_classify` on arrays: 0 idle-host, 1 idle-wait, 2 idle-unknown."""
    return np.where(launch < 0, 2, np.where(launch >= idle_from, 0, 1))


_IDLE_BY_CLASS = (IDLE_HOST, IDLE_WAIT, IDLE_UNKNOWN)


@dataclass
class _Split:
    """One step's `_split`, summed: ns per component (busy components in the order they first ran, then idle
    ones in the order they first occurred, as `_split` builds them) and its idle-host stretches."""

    parts: dict[str, float]
    idle_stretches: int = 0
    host_max_ns: int = 0  # the longest idle-host stretch
    host_long_ns: int = 0  # idle-host time in stretches of at least LONG_HOST_GAP_NS
    long_host: list[tuple[int, int]] = field(default_factory=list)  # (start, ns) of those stretches, in time order


def _from_split(busy: dict[str, float], idle: list[tuple[str, int, int]]) -> _Split:
    parts = dict(busy)
    for comp, _, ns in idle:
        parts[comp] = parts.get(comp, 0.0) + ns
    host = [(t, ns) for comp, t, ns in idle if comp == IDLE_HOST]
    long_host = [(t, ns) for t, ns in host if ns >= LONG_HOST_GAP_NS]
    return _Split(parts, len(idle), max((ns for _, ns in host), default=0), sum(ns for _, ns in long_host), long_host)


def _overlap_pairs(work: _Work) -> np.ndarray:
    """How many neighbouring intervals overlap up to each interval (the first i + 1)."""
    return np.concatenate(([0], np.cumsum(work.start[1:] < work.end[:-1])))


@dataclass
class _Rows:
    """Windows split at once, as rows: one per (window, component) in each window's component order (busy
    components in the order they first ran, then idle ones in the order they first occurred, as `_split` fills
    its dict), with its ns as `_split` sums them (float64, added in the same order); and per window its idle
    stretches' count, longest idle-host stretch and idle-host time in long stretches, and those long stretches
    as rows (window, start, ns) in time order. Windows are positions in the arrays given."""

    win: np.ndarray
    label: np.ndarray  # index into work.names + _IDLE_BY_CLASS
    value: np.ndarray
    idle_n: np.ndarray
    host_max: np.ndarray
    host_long: np.ndarray
    long_win: np.ndarray
    long_at: np.ndarray
    long_ns: np.ndarray


def _concat_rows(parts: list[tuple[np.ndarray, _Rows]], n: int) -> _Rows:
    """Rows of several calls, each for the windows at `which`, as one _Rows over n windows (ordered by window)."""
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
    return _Rows(win[order], cat(lambda w, r: r.label, np.int64)[order], cat(lambda w, r: r.value, np.float64)[order],
                 per_window["idle_n"], per_window["host_max"], per_window["host_long"], long_win[long_order],
                 cat(lambda w, r: r.long_at, np.int64)[long_order], cat(lambda w, r: r.long_ns, np.int64)[long_order])


def _rows(n: int, n_names: int, win: np.ndarray, label: np.ndarray, ns: np.ndarray, key: np.ndarray,
          idle_win: np.ndarray, idle_class: np.ndarray, idle_at: np.ndarray, idle_ns: np.ndarray,
          idle_key: np.ndarray) -> _Rows:
    """_Rows of n windows from busy time (window, name, ns, key) and idle stretches (window, class, start, ns,
    key), each summed per (window, component) in the order given and ordered busy first, then idle, each by
    the key of its first row."""
    width = n_names + len(_IDLE_BY_CLASS)
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
    return _Rows(uniq // width, uniq % width, sums[order], np.bincount(idle_win, minlength=n).astype(np.int64),
                 host_max, host_long.astype(np.int64), idle_win[long][long_order], idle_at[long][long_order],
                 idle_ns[long][long_order])


def _intervals(work: _Work, w0: np.ndarray, w1: np.ndarray, lo: np.ndarray, hi: np.ndarray,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each window's intervals: (window, position in it, index into work, start and end clipped to it)."""
    count = hi - lo
    total = int(count.sum())
    step = np.repeat(np.arange(len(w0)), count)  # window of each interval
    first = np.repeat(np.cumsum(count) - count, count)  # position of its window's first interval
    pos = np.arange(total) - first
    idx = np.repeat(lo, count) + pos
    return step, pos, idx, np.maximum(work.start[idx], w0[step]), np.minimum(work.end[idx], w1[step])


def _tail_class(work: _Work, hi: np.ndarray, t_end: np.ndarray, host_range: np.ndarray) -> np.ndarray:
    """The idle class of a window's end after t_end: the next work's launch call, else host time when the
    window is a host range (`_split`'s `tail`)."""
    nxt = np.minimum(hi, len(work.start) - 1)
    return np.where(hi >= len(work.start), np.where(host_range, 0, 2), _idle_class(work.launch[nxt], t_end))


def _sweep_rows(work: _Work, w0: np.ndarray, w1: np.ndarray, host_range: np.ndarray, lo: np.ndarray,
                hi: np.ndarray) -> _Rows:
    """`_split`'s sweep of windows whose work overlaps itself, on arrays: the events (interval starts and ends,
    ends first at a time, then by interval) in `_split`'s order; between two event times each active interval
    gets the time over the number active, summed per component in time order as `_split` adds it."""
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


def _fast_rows(work: _Work, w0: np.ndarray, w1: np.ndarray, host_range: np.ndarray, lo: np.ndarray,
               hi: np.ndarray) -> _Rows:
    """`_split` of windows whose intervals do not overlap (their ends rise with their starts), on arrays."""
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


def _split_rows(work: _Work, w0: np.ndarray, w1: np.ndarray, host_range: np.ndarray,
                pairs: np.ndarray | None = None) -> _Rows:
    """`_split` of many windows of one device at once, as _Rows: windows whose GPU work does not overlap itself
    (one stream at a time: nearly every step) in one pass over their intervals, the others through the sweep on
    arrays, FAST_CHUNK windows at a time (the arrays hold a row per interval, or per event). `pairs`:
    `_overlap_pairs(work)`, when already known."""
    lo = np.searchsorted(work.reach, w0, side="right")
    hi = np.maximum(np.searchsorted(work.start, w1, side="left"), lo)
    count = hi - lo
    if pairs is None:
        pairs = _overlap_pairs(work)
    overlapping = (count > 1) & (pairs[np.maximum(hi - 1, 0)] - pairs[lo] > 0)
    parts = []
    for make, which in ((_sweep_rows, np.flatnonzero(overlapping)), (_fast_rows, np.flatnonzero(~overlapping))):
        for at in range(0, len(which), FAST_CHUNK):
            part = which[at:at + FAST_CHUNK]
            parts.append((part, make(work, w0[part], w1[part], host_range[part], lo[part], hi[part])))
    return _concat_rows(parts, len(w0))


def _split_many(work: _Work, w0: np.ndarray, w1: np.ndarray, host_range: np.ndarray,
                pairs: np.ndarray | None = None) -> list[_Split]:
    """`_split_rows` as a _Split per window (what `_split` gives, summed; tests/test_breakdown.py holds the two
    together)."""
    r = _split_rows(work, w0, w1, host_range, pairs)
    labels = work.names + list(_IDLE_BY_CLASS)
    out = [_Split({}, int(a), int(b), int(c)) for a, b, c in zip(r.idle_n.tolist(), r.host_max.tolist(),
                                                                  r.host_long.tolist(), strict=True)]
    for w, lab, v in zip(r.win.tolist(), r.label.tolist(), r.value.tolist(), strict=True):
        out[w].parts[labels[lab]] = v
    for w, a, v in zip(r.long_win.tolist(), r.long_at.tolist(), r.long_ns.tolist(), strict=True):
        out[w].long_host.append((a, v))
    return out


def _round_rows(win: np.ndarray, value: np.ndarray, total: np.ndarray) -> np.ndarray:
    """`_round_to` of many windows at once: rows (window, ns as float), ordered by window, each window's rows in
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


def _emit(rows: _Rows, which: list[int], windows: list[tuple[Step, int, int, str]], w0: np.ndarray,
          w1: np.ndarray, host_range_ns: np.ndarray, labels: list[str], arena: array[int],
          out: dict[int, StepBreakdown]) -> None:
    """The StepBreakdowns of windows[which] (their rows: `rows`, windows numbered by position in `which`), their
    numbers appended to `arena`: each window's components rounded to integer ns adding up to its length
    (`_round_to`: largest remainders first, ties in component order; zeros dropped), on arrays."""
    n = len(which)
    final = _round_rows(rows.win, rows.value, w1 - w0)
    keep = final > 0
    k_win, k_label, k_val = rows.win[keep], rows.label[keep], final[keep]
    cnt = np.bincount(k_win, minlength=n)
    k_pos = np.arange(len(k_win)) - (np.cumsum(cnt) - cnt)[k_win]
    sizes = _FIXED + cnt
    offsets = np.cumsum(sizes) - sizes
    piece = np.zeros(int(sizes.sum()), np.int64)
    for j, col in enumerate((w0, w1, host_range_ns, rows.host_max, rows.host_long, rows.idle_n)):
        piece[offsets + j] = col
    piece[offsets[k_win] + _FIXED + k_pos] = k_val
    # The components' names per window: one shared tuple per distinct sequence.
    grid = np.full((n, int(cnt.max()) if n else 0), -1, np.int64)
    grid[k_win, k_pos] = k_label
    seqs, seq_of = np.unique(grid, axis=0, return_inverse=True)
    named = []
    for row in seqs.tolist():
        t = tuple(labels[c] for c in row if c >= 0)
        named.append(_COMPONENT_NAMES.setdefault(t, t))
    # The longest idle-host stretches of at least LONG_HOST_GAP_NS, longest first (ties in time order).
    gaps: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for w, a, v in zip(rows.long_win.tolist(), rows.long_at.tolist(), rows.long_ns.tolist(), strict=True):
        gaps[w].append((a, a + v))
    base = len(arena)
    arena.frombytes(piece.tobytes())
    for j, (i, at, names) in enumerate(zip(which, (offsets + base).tolist(), np.asarray(seq_of).reshape(-1).tolist(),
                                           strict=True)):
        s, _, _, source = windows[i]
        got = gaps.get(j)
        host_gaps = tuple(sorted(got, key=lambda g: g[0] - g[1])[:MAX_HOST_GAPS]) if got else ()
        out[s.index] = s.breakdown = StepBreakdown._of(named[names], arena, at, source, host_gaps)


def _host_range(s: Step) -> int:
    """The step's range on the host (ns), _NO_RANGE without one."""
    if s.range_side == "cpu" and s.range_start_ns is not None and s.range_end_ns is not None:
        return s.range_end_ns - s.range_start_ns
    return _NO_RANGE


def breakdowns(db: TraceDB, trace_id: int, steps: list[Step]) -> dict[int, StepBreakdown]:
    """The breakdown of every step (by step index); each step's `breakdown` is set too."""
    if not steps:
        return {}
    work = _gpu_work(db, trace_id, steps)
    # Each step's device by index: a list when step i is at position i (as group_steps numbers them; a dict of
    # 10^6 steps is 0.1 GB), else a dict.
    numbered = all(s.index == i for i, s in enumerate(steps))
    devices: Sequence[Any] | dict[int, Any] = ([_step_device(s) for s in steps] if numbered
                                               else {s.index: _step_device(s) for s in steps})
    windows = _windows(steps, devices)
    n = len(windows)
    w0 = np.fromiter((w[1] for w in windows), np.int64, n)
    w1 = np.fromiter((w[2] for w in windows), np.int64, n)
    host = np.fromiter((w[3] == "cpu-range" for w in windows), bool, n)
    host_range_ns = np.fromiter((_host_range(w[0]) for w in windows), np.int64, n)
    # Each window's GPU work: its device's, or the only device's when the step's is not known.
    by_device: dict[Any, list[int]] = defaultdict(list)
    for j, (s, a, b, _) in enumerate(windows):
        dev = devices[s.index]
        if dev not in work:
            if len(work) != 1:
                continue
            dev = next(iter(work))
        if b > a:
            by_device[dev].append(j)
    del devices
    names = next(iter(work.values())).names if work else []
    labels = names + list(_IDLE_BY_CLASS)
    out: dict[int, StepBreakdown] = {}
    arena: array[int] = array("q")  # every step's numbers, one after the other
    done = np.zeros(n, bool)
    for dev, js in by_device.items():
        wk = work[dev]
        pairs = _overlap_pairs(wk)
        # SPLIT_CHUNK windows at a time, each made a StepBreakdown at once (bounds the rows held).
        for at in range(0, len(js), SPLIT_CHUNK):
            part = js[at:at + SPLIT_CHUNK]
            p = np.array(part, np.int64)
            done[p] = True
            _emit(_split_rows(wk, w0[p], w1[p], host[p], pairs), part, windows, w0[p], w1[p], host_range_ns[p],
                  labels, arena, out)
    rest = np.flatnonzero(~done)  # windows of no device's work (all idle-unknown), or empty
    if len(rest):
        r0, r1 = w0[rest], w1[rest]
        has = np.flatnonzero(r1 > r0)
        zero, none = np.zeros(len(rest), np.int64), np.zeros(0, np.int64)
        rows = _Rows(has, np.full(len(has), labels.index(IDLE_UNKNOWN), np.int64), (r1 - r0)[has].astype(np.float64),
                     zero, zero, zero, none, none, none)
        _emit(rows, rest.tolist(), windows, r0, r1, host_range_ns[rest], labels, arena, out)
    return {s.index: out[s.index] for s, *_ in windows}
