"""An analysis's steps and their attention launches as columns (tuples of the objects' attributes and numpy arrays),
read in one pass over each kind of object: what the analysis tables (`report/tables.py`) and the document's
trace-level sections (`report/json_doc.py`) are built from. Asking each step and launch for each column through a
generator, and the steps' derived properties (phase, split_kv, attention_ns, wall_ns) launch by launch, was most
of the time of writing a long trace's tables (10^5-10^6 steps and launches)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np

from traceinsight.model.step_breakdown import components_ns

# A split-KV state as a code: False, True, None (unknown).
SPLIT_CODES = {False: 0, True: 1, None: 2}
SPLIT_STATES: tuple[bool | None, ...] = (False, True, None)

_STEP = attrgetter("index", "name", "source", "range_id", "start_ns", "end_ns", "kernel_count", "breakdown",
                   "launches")
_LAUNCH = attrgetter("attention", "phase", "phase_evidence", "split_kv", "split_evidence", "merges", "prepares",
                     "tiles")
_KERNEL = attrgetter("kernel_id", "name", "kernel", "family", "backend", "params", "stream_id", "start_ns", "dur_ns",
                     "grid", "block", "registers_per_thread", "smem_bytes")
# A breakdown's numbers as they lie in its trace's shared array, and the host range's value there for None.
ARENA_FIELDS = ("start_ns", "end_ns", "host_range_ns", "host_gap_max_ns", "host_long_ns", "idle_stretches")
NO_RANGE = -(2**63)
_ARENA = attrgetter("_data", "_at", "source", "host_gaps", "_names")


def _columns(getter: attrgetter[Any], objects: Sequence[Any], width: int) -> list[tuple[Any, ...]]:
    """The attributes `getter` reads, one tuple per attribute over `objects`."""
    if not objects:
        return [()] * width
    return list(zip(*map(getter, objects), strict=True))


def _int64(values: Sequence[int]) -> np.ndarray:
    return np.fromiter(values, np.int64, len(values))


@dataclass
class StepColumns:
    """Steps (in the analysis's order) and their launches (in step order, then launch order) as columns.

    Per step: index, name, source, range_id, start, end, dur, kernel_count, breakdown (or None), windowed (has
    one), window start/end (the breakdown's window, else the GPU span), wall (its wall_ns), attention (its
    attention_ns), phase, split (SPLIT_CODES of its split_kv), launch_count. Per launch: step (its step's
    position), launch (its place in the step), the Launch fields (kernel: the attention Kernel), each merge and
    prepare group, merge_ns / prepare_ns, split (codes), and the attention Kernel's fields (k_*)."""

    n: int
    index: np.ndarray
    name: tuple[str, ...]
    source: tuple[str, ...]
    range_id: tuple[int | None, ...]
    start: np.ndarray
    end: np.ndarray
    kernel_count: np.ndarray
    breakdown: tuple[Any, ...]
    windowed: np.ndarray
    window_start: np.ndarray
    window_end: np.ndarray
    wall: np.ndarray
    attention: np.ndarray
    phase: list[str]
    split: np.ndarray
    launch_count: np.ndarray
    # launches
    m: int
    step: np.ndarray
    launch: np.ndarray
    kernel: tuple[Any, ...]
    l_phase: tuple[str, ...]
    l_phase_evidence: tuple[str, ...]
    l_split: np.ndarray
    l_split_kv: tuple[bool | None, ...]
    l_split_evidence: tuple[str, ...]
    merges: tuple[Sequence[Any], ...]
    prepares: tuple[Sequence[Any], ...]
    tiles: tuple[dict[str, Any] | None, ...]
    merge_ns: np.ndarray
    prepare_ns: np.ndarray
    k_id: np.ndarray
    k_name: tuple[str, ...]
    k_kernel: tuple[str, ...]
    k_family: tuple[str, ...]
    k_backend: tuple[str | None, ...]
    k_params: tuple[dict[str, Any], ...]
    k_stream: tuple[int | None, ...]
    k_start: np.ndarray
    k_dur: np.ndarray
    k_grid: tuple[tuple[int, int, int], ...]
    k_block: tuple[tuple[int, int, int], ...]
    k_registers: tuple[int | None, ...]
    k_smem: tuple[int | None, ...]

    # the windowed steps' breakdowns (in step order): their `ARENA_FIELDS` (an int64 row each, NO_RANGE for no
    # host range), sources and host gaps
    window_numbers: np.ndarray
    window_source: tuple[str, ...]
    host_gaps: tuple[tuple[tuple[int, int], ...], ...]
    component_names: tuple[tuple[str, ...], ...]  # their components' names: one tuple shared per sequence
    component_ns: np.ndarray  # their components' ns, one breakdown's after the other's

    @property
    def dur(self) -> np.ndarray:
        dur: np.ndarray = self.end - self.start
        return dur


def _window_fields(present: list[Any]) -> tuple[np.ndarray, tuple[str, ...], tuple[Any, ...],
                                                 tuple[tuple[str, ...], ...], np.ndarray]:
    """These breakdowns' `ARENA_FIELDS` (an int64 row each, NO_RANGE for no host range), sources, host gaps,
    component names and components' ns (all breakdowns' one after the other): the numbers read from the int64 array
    the breakdowns of a trace share (`model.breakdown.StepBreakdown`: each one's numbers at its `_at`, these first,
    then its components') when they share one and the first one's properties read the same from it; else through
    the properties."""
    try:
        data, at, source, host_gaps, names = _columns(_ARENA, present, 5)
        shared = len(set(map(id, data))) == 1
    except AttributeError:  # breakdowns that keep their numbers otherwise
        shared = False
    if shared:
        arena = np.frombuffer(data[0], np.int64)
        first = np.fromiter(at, np.int64, len(at))
        rows = arena[first[:, None] + np.arange(len(ARENA_FIELDS))]
        lengths = np.fromiter(map(len, names), np.int64, len(names))
        starts = first + len(ARENA_FIELDS) - (np.cumsum(lengths) - lengths)
        ns = arena[np.repeat(starts, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)]
        del arena  # the shared array may grow again once its buffer is released
        b = present[0]
        if rows[0].tolist() == _numbers(b) and ns[:len(names[0])].tolist() == list(b.component_ns()):
            return rows, source, host_gaps, names, ns
    fields = _columns(attrgetter("source", "host_gaps", "component_names"), present, 3)
    rows = np.array([_numbers(b) for b in present], np.int64).reshape(-1, len(ARENA_FIELDS))
    return rows, fields[0], fields[1], fields[2], components_ns(present)


def _numbers(b: Any) -> list[int]:
    """A breakdown's `ARENA_FIELDS` (NO_RANGE for no host range)."""
    return [NO_RANGE if v is None else v for v in map(b.__getattribute__, ARENA_FIELDS)]


def _group_ns(groups: tuple[Sequence[Any], ...]) -> np.ndarray:
    """Each group's kernels' dur_ns added up (most groups are empty)."""
    out = np.zeros(len(groups), np.int64)
    full = [i for i, g in enumerate(groups) if g]
    if full:
        out[full] = [sum(k.dur_ns for k in groups[i]) for i in full]
    return out


def _per_step(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """`values` (one per launch, in step order) added up per step (`counts` launches each)."""
    total = np.zeros(len(values) + 1, np.int64)
    np.cumsum(values, out=total[1:])
    ends = np.cumsum(counts)
    out: np.ndarray = total[ends] - total[ends - counts]
    return out


def step_columns(steps: Sequence[Any]) -> StepColumns:
    """`steps` (model.steps.Step, each with its breakdown or None) as columns."""
    n = len(steps)
    (index, name, source, range_id, start, end, kernel_count, breakdown, launch_lists) = _columns(_STEP, steps, 9)
    counts = np.fromiter(map(len, launch_lists), np.int64, n)
    launches = list(itertools.chain.from_iterable(launch_lists))
    m = len(launches)
    kernel, l_phase, l_evidence, l_split, l_split_evidence, merges, prepares, tiles = _columns(_LAUNCH, launches, 8)
    (k_id, k_name, k_kernel, k_family, k_backend, k_params, k_stream, k_start, k_dur, k_grid, k_block, k_registers,
     k_smem) = _columns(_KERNEL, kernel, 13)
    split = np.fromiter(map(SPLIT_CODES.__getitem__, l_split), np.int8, m)
    merge_ns, prepare_ns = _group_ns(merges), _group_ns(prepares)
    k_dur_a = _int64(k_dur)
    starts, ends = _int64(start), _int64(end)
    windowed = np.fromiter((b is not None for b in breakdown), bool, n)
    w_start, w_end = starts.copy(), ends.copy()
    window_numbers, window_source, host_gaps, component_names, component_ns = _window_fields(
        [b for b in breakdown if b is not None])
    w_start[windowed], w_end[windowed] = window_numbers[:, 0], window_numbers[:, 1]
    # A step's split_kv and phase: the one state its launches share (else None; a phase by `Step.phase`'s rule).
    first = np.cumsum(counts) - counts
    last = first + counts - 1
    has = counts > 0
    agree = np.zeros(n, bool)
    step_split = np.full(n, SPLIT_CODES[None], np.int8)
    if m:
        lo, hi = np.minimum.reduceat(split, first[has]), np.maximum.reduceat(split, first[has])
        step_split[has] = np.where(lo == hi, lo, SPLIT_CODES[None])
        phases = {p: i for i, p in enumerate(dict.fromkeys(l_phase))}
        codes = np.fromiter(map(phases.__getitem__, l_phase), np.int64, m)
        agree[has] = np.minimum.reduceat(codes, first[has]) == np.maximum.reduceat(codes, first[has])
    step_phase = np.array(l_phase, object)[last].tolist() if m else ["unknown"] * n
    for i in np.flatnonzero(~agree).tolist():
        step_phase[i] = steps[i].phase
    return StepColumns(
        n=n, index=_int64(index), name=name, source=source, range_id=range_id, start=starts, end=ends,
        kernel_count=_int64(kernel_count), breakdown=breakdown, windowed=windowed, window_start=w_start,
        window_end=w_end, window_numbers=window_numbers, window_source=window_source, host_gaps=host_gaps,
        component_names=component_names, component_ns=component_ns,
        wall=np.where(windowed, w_end - w_start, ends - starts),
        attention=_per_step(k_dur_a + merge_ns + prepare_ns, counts), phase=step_phase, split=step_split,
        launch_count=counts, m=m, step=np.repeat(np.arange(n, dtype=np.int64), counts),
        launch=np.arange(m, dtype=np.int64) - np.repeat(first, counts), kernel=kernel, l_phase=l_phase,
        l_phase_evidence=l_evidence, l_split=split, l_split_kv=l_split, l_split_evidence=l_split_evidence,
        merges=merges, prepares=prepares, tiles=tiles, merge_ns=merge_ns, prepare_ns=prepare_ns, k_id=_int64(k_id),
        k_name=k_name, k_kernel=k_kernel, k_family=k_family, k_backend=k_backend, k_params=k_params,
        k_stream=k_stream, k_start=_int64(k_start), k_dur=k_dur_a, k_grid=k_grid, k_block=k_block,
        k_registers=k_registers,
        k_smem=k_smem)
