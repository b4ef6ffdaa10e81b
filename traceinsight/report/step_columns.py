"""An analysis's steps and their attention launches as columns (numpy arrays, and `Coded` columns for the
attributes whose rows share a few objects: names, phases, evidence, kernel shapes, merge groups), read in one pass
over each kind of object: what the analysis tables (`report/tables.py`) and the document's
trace-level sections (`report/json_doc.py`) are built from. Asking each step and launch for each column through a
generator, and the steps' derived properties (phase, split_kv, attention_ns, wall_ns) launch by launch, was most
of the time of writing a long trace's tables (10^5-10^6 steps and launches). A tuple of 10^6 references is 8 MB a
column (18 per-launch tuples held 1.5 GB at 10M kernels with the tables' other columns); a Coded column is a byte a
row."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np

from traceinsight.model.kernel_columns import kernel_columns, kernel_ints
from traceinsight.model.shared_objects import Coded, small_codes
from traceinsight.model.step_arrays import ARENA_FIELDS as ARENA_FIELDS  # tables.py reads them here
from traceinsight.model.step_arrays import StepArrays, step_arrays
from traceinsight.model.step_breakdown import NO_RANGE as NO_RANGE

# A split-KV state as a code: False, True, None (unknown).
SPLIT_CODES = {False: 0, True: 1, None: 2}
SPLIT_STATES: tuple[bool | None, ...] = (False, True, None)

_LAUNCH = ("phase", "phase_evidence", "split_kv", "split_evidence", "merges", "prepares", "tiles")


@dataclass
class StepColumns:
    """Steps (in the analysis's order) and their launches (in step order, then launch order) as columns.

    Per step: index, name, source, range_id, start, end, dur, kernel_count, breakdown (or None), windowed (has
    one), window start/end (the breakdown's window, else the GPU span), wall (its wall_ns), attention (its
    attention_ns), phase, split (SPLIT_CODES of its split_kv), launch_count. Per launch: step (its step's
    position), launch (its place in the step), the Launch fields, each merge and prepare group (`group_ns`: their
    ns), split (codes), and the attention Kernel's fields (k_*)."""

    n: int
    index: np.ndarray
    name: Coded
    source: Coded
    range_id: tuple[int | None, ...]
    start: np.ndarray
    end: np.ndarray
    kernel_count: np.ndarray
    breakdown: tuple[Any, ...]
    windowed: np.ndarray
    window_start: np.ndarray
    window_end: np.ndarray
    attention: np.ndarray
    phase: Coded
    split: np.ndarray
    launch_count: np.ndarray
    # launches
    m: int
    l_phase: Coded
    l_phase_evidence: Coded
    l_split: np.ndarray
    l_split_kv: Coded
    l_split_evidence: Coded
    merges: Coded
    prepares: Coded
    tiles: Coded
    k_id: np.ndarray
    k_name: Coded
    k_kernel: Coded
    k_family: Coded
    k_backend: Coded
    k_params: Coded
    k_stream: Coded
    k_start: np.ndarray
    k_dur: np.ndarray
    k_grid: Coded
    k_block: Coded
    k_registers: Coded
    k_smem: Coded

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

    @property
    def wall(self) -> np.ndarray:
        """Each step's wall_ns: its window's length (made when asked for)."""
        wall: np.ndarray = self.window_end - self.window_start
        return wall

    @property
    def first(self) -> np.ndarray:
        """Each step's first launch's row."""
        first: np.ndarray = np.cumsum(self.launch_count) - self.launch_count
        return first

    @property
    def step(self) -> np.ndarray:
        """Each launch's step's position (made when asked for: 8 bytes a launch)."""
        return np.repeat(np.arange(self.n, dtype=np.int64), self.launch_count)

    @property
    def launch(self) -> np.ndarray:
        """Each launch's place in its step."""
        out: np.ndarray = np.arange(self.m, dtype=np.int64) - np.repeat(self.first, self.launch_count)
        return out


def group_ns(groups: Coded) -> np.ndarray:
    """Each group's kernels' dur_ns added up (most groups are empty), from the kernels' rows: once per distinct
    group."""
    values = groups.values
    lengths = np.fromiter(map(len, values), np.int64, len(values))
    out = np.zeros(len(values), np.int64)
    full = np.flatnonzero(lengths)
    if len(full):
        dur = kernel_ints(list(itertools.chain.from_iterable(values)), ("dur_ns",))["dur_ns"]
        starts = np.cumsum(lengths[full]) - lengths[full]
        out[full] = np.add.reduceat(dur, starts)
    got: np.ndarray = out[groups.codes]
    return got


def _per_step(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """`values` (one per launch, in step order) added up per step (`counts` launches each)."""
    total = np.zeros(len(values) + 1, np.int64)
    np.cumsum(values, out=total[1:])
    ends = np.cumsum(counts)
    out: np.ndarray = total[ends] - total[ends - counts]
    return out


def step_columns(steps: Sequence[Any], arrays: StepArrays | None = None) -> StepColumns:
    """`steps` (model.steps.Step, each with its breakdown or None) as columns. `arrays`: the same steps as
    `model.step_arrays` has them, when the caller has them (the rules' `TraceAnalysis.step_arrays`), else read
    here."""
    a = step_arrays(steps) if arrays is None else arrays
    n = a.n
    name, source = (Coded.of(list(map(attrgetter(f), steps))) for f in ("name", "source"))
    range_id = tuple(map(attrgetter("range_id"), steps))  # one attribute at a time: no tuple per step
    kernel_count = np.fromiter(map(attrgetter("kernel_count"), steps), np.int64, n)
    counts = a.launch_count
    launches = list(itertools.chain.from_iterable(a.launches))
    m = len(launches)
    # one attribute at a time: a column of references lives only until it is coded
    l_phase, l_evidence, l_split, l_split_evidence, merges, prepares, tiles = (
        Coded.of(list(map(attrgetter(f), launches))) for f in _LAUNCH)
    attention = list(map(attrgetter("attention"), launches))
    del launches
    own, shape = kernel_columns(attention, ("kernel_id", "start_ns", "dur_ns"))  # not 13 properties of each
    del attention
    k_name, k_kernel, k_family, k_backend, _, _, k_params, k_stream, _, k_grid, k_block, k_registers, k_smem = shape
    split = np.array([SPLIT_CODES[v] for v in l_split.values], np.int8)[l_split.codes]
    k_dur_a = own["dur_ns"]
    # A step's split_kv and phase: the one state its launches share (else None; a phase by `Step.phase`'s rule).
    first = np.cumsum(counts) - counts
    last = first + counts - 1
    has = counts > 0
    agree = np.zeros(n, bool)
    step_split = np.full(n, SPLIT_CODES[None], np.int8)
    if m:
        lo, hi = np.minimum.reduceat(split, first[has]), np.maximum.reduceat(split, first[has])
        step_split[has] = np.where(lo == hi, lo, SPLIT_CODES[None])
        words = {p: i for i, p in enumerate(dict.fromkeys(l_phase.values))}  # a code per distinct phase text
        codes = np.array([words[p] for p in l_phase.values], np.int64)[l_phase.codes]
        agree[has] = np.minimum.reduceat(codes, first[has]) == np.maximum.reduceat(codes, first[has])
        values, codes = list(l_phase.values), l_phase.codes[last].astype(np.int64)
    else:
        values, codes = ["unknown"], np.zeros(n, np.int64)
    for i in np.flatnonzero(~agree).tolist():
        codes[i] = len(values)
        values.append(steps[i].phase)
    return StepColumns(
        n=n, index=a.index, name=name, source=source, range_id=range_id, start=a.start, end=a.end,
        kernel_count=kernel_count, breakdown=a.breakdown, windowed=a.windowed, window_start=a.window_start,
        window_end=a.window_end, window_numbers=a.window_numbers, window_source=a.window_source,
        host_gaps=a.host_gaps, component_names=a.component_names, component_ns=a.component_ns,
        attention=_per_step(k_dur_a + group_ns(merges) + group_ns(prepares), counts),
        phase=Coded(values, small_codes(codes, len(values))), split=step_split,
        launch_count=counts, m=m, l_phase=l_phase, l_phase_evidence=l_evidence, l_split=split, l_split_kv=l_split,
        l_split_evidence=l_split_evidence, merges=merges, prepares=prepares, tiles=tiles, k_id=own["kernel_id"],
        k_name=k_name, k_kernel=k_kernel, k_family=k_family, k_backend=k_backend, k_params=k_params,
        k_stream=k_stream, k_start=own["start_ns"], k_dur=k_dur_a,
        k_grid=k_grid, k_block=k_block, k_registers=k_registers, k_smem=k_smem)
