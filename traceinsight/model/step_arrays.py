"""An analysis's steps as per-step arrays, read once from the Step objects and their breakdowns: what the rules
(`traceinsight.diagnose`) and the report's step columns (`report/step_columns.py`) read instead of asking each of
10^5-10^6 steps for its wall time, window, components and launches property by property.

The breakdowns' numbers come from the int64 array the breakdowns of a trace share (`model.step_breakdown`), in
one gather, when they share one; else through their properties."""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np

from traceinsight.model.phases import PREFILL_PHASES
from traceinsight.model.row_chunks import gather
from traceinsight.model.step_breakdown import NO_RANGE, components_ns
from traceinsight.model.steps import NO_TIME, step_times

# A breakdown's numbers as they lie in its trace's shared array, and the host range's value there for None.
ARENA_FIELDS = ("start_ns", "end_ns", "host_range_ns", "host_gap_max_ns", "host_long_ns", "idle_stretches")
_ARENA = attrgetter("_c", "_r", "source", "_names")
_BREAKDOWN = attrgetter("breakdown")
_INDEX = attrgetter("index")
_CHUNK = attrgetter("_c")
_ROW = attrgetter("_r")
_LAUNCHES = attrgetter("launches")
_SIDE = attrgetter("range_side")
_LAUNCH = attrgetter("phase", "attention.name")
_CPU = "cpu"


# Objects whose attributes `columns` reads at a time (their tuples of attributes are made a chunk at a time).
_COLUMNS_CHUNK = 1 << 16


def columns(getter: attrgetter[Any], objects: Sequence[Any], width: int) -> list[tuple[Any, ...]]:
    """The attributes `getter` reads, one tuple per attribute over `objects`. A chunk of objects at a time: one
    `zip(*map(getter, objects))` holds a tuple per object at once (10^6-10^7 steps or launches: ~0.1-0.3 GB)."""
    if len(objects) <= _COLUMNS_CHUNK:
        return list(zip(*map(getter, objects), strict=True)) if len(objects) else [()] * width
    out: list[list[Any]] = [[] for _ in range(width)]
    rest = iter(objects)
    while chunk := list(itertools.islice(rest, _COLUMNS_CHUNK)):
        for column, values in zip(out, zip(*map(getter, chunk), strict=True), strict=True):
            column.extend(values)
    return [tuple(column) for column in out]


# Where the breakdowns that have host gaps keep them: the int64 array they share, the breakdowns' positions among
# those given, and where each one's count of gaps lies in the array (its gaps follow).
GapRows = tuple[Any, np.ndarray, np.ndarray]


def window_fields(present: Sequence[Any]) -> tuple[np.ndarray, tuple[str, ...], tuple[tuple[str, ...], ...],
                                                    np.ndarray, GapRows | None]:
    """These breakdowns' `ARENA_FIELDS` (an int64 row each, NO_RANGE for no host range), sources, component names,
    components' ns (all breakdowns' one after the other) and where their host gaps lie (`GapRows`): the numbers
    read from the int64 array the breakdowns of a trace share (`model.step_breakdown.StepBreakdown`: each one's
    numbers at its `_at`, these first, then its components', then its host gaps) when they share one and the first
    one's properties read the same from it; else through the properties (and no GapRows)."""
    shared = _shared(present)
    if shared is not None:
        data, first, source, names, lengths = shared
        arena = np.frombuffer(data, np.int64)
        rows = arena[first[:, None] + np.arange(len(ARENA_FIELDS))]
        starts = first + len(ARENA_FIELDS) - (np.cumsum(lengths) - lengths)
        ns = arena[np.repeat(starts, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)]
        where = first + len(ARENA_FIELDS) + lengths
        has = np.flatnonzero(arena[where])
        del arena  # the shared array may grow again once its buffer is released
        b = present[0]
        if rows[0].tolist() == _numbers(b) and ns[:len(names[0])].tolist() == list(b.component_ns()):
            return rows, source, names, ns, (data, has, where[has])
    fields = columns(attrgetter("source", "component_names"), present, 2)
    rows = np.array([_numbers(b) for b in present], np.int64).reshape(-1, len(ARENA_FIELDS))
    return rows, fields[0], fields[1], components_ns(present), None


def _shared(present: Sequence[Any]) -> tuple[Any, np.ndarray, tuple[str, ...], tuple[tuple[str, ...], ...],
                                             np.ndarray] | None:
    """The int64 array these breakdowns share, where each one's numbers start in it, their sources, component
    names and how many components each has; None when they hold their numbers otherwise."""
    try:
        chunks, rows, source, names = columns(_ARENA, present, 4)
    except AttributeError:  # breakdowns that keep their numbers otherwise
        return None
    data = {id(c.data): c.data for c in dict.fromkeys(chunks)}
    if len(data) != 1:
        return None
    at = gather(present, _CHUNK, _ROW, ("at",))["at"]
    lengths = np.fromiter(map(len, names), np.int64, len(names))
    return next(iter(data.values())), at, source, names, lengths


def host_gaps(gaps: GapRows, n: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """The `host_gaps` of `n` breakdowns whose gaps lie as `gaps` says (`window_fields`): how many, then their
    starts and ends, in the array they share."""
    data, has, where = gaps
    arena = np.frombuffer(data, np.int64)
    counts = arena[where]
    twice = 2 * counts
    flat = arena[np.repeat(where + 1 - (np.cumsum(twice) - twice), twice)
                 + np.arange(int(twice.sum()), dtype=np.int64)].tolist()
    del arena
    pairs = list(zip(flat[::2], flat[1::2], strict=True))
    starts = np.cumsum(counts) - counts
    one = counts == 1  # most: one gap each, its 1-tuple made by zip in C
    out = np.empty(n, object)
    out.fill(())
    out[has[one]] = np.fromiter(zip(map(pairs.__getitem__, starts[one].tolist())), object, int(one.sum()))
    for i, o, c in zip(has[~one].tolist(), starts[~one].tolist(), counts[~one].tolist(), strict=True):
        out[i] = tuple(pairs[o:o + c])
    got: list[tuple[tuple[int, int], ...]] = out.tolist()
    return tuple(got)


def _numbers(b: Any) -> list[int]:
    """A breakdown's `ARENA_FIELDS` (NO_RANGE for no host range)."""
    return [NO_RANGE if v is None else v for v in map(b.__getattribute__, ARENA_FIELDS)]


@dataclass(frozen=True, eq=False)
class StepArrays:
    """Steps (in the given order, row i the i-th step) as arrays.

    index, start, end (GPU span), windowed (has a breakdown), window_start / window_end (the breakdown's window,
    else the GPU span), wall (what `Step.wall_ns` gives), host_long (the breakdown's host_long_ns, 0 without one),
    cpu_range_start / cpu_range_end (the step ranges on the host with both ends, read when asked for),
    launch_count, prefill (a launch of the step is prefill or mixed), signature (the step's decode attention
    kernels, `signatures[code]`, -1 for none); the windowed steps' breakdown numbers (`window_numbers`, `ARENA_FIELDS`),
    sources, host gaps, components' names (one tuple per distinct sequence) and ns (one after the other); and
    every step's components as a matrix (`component_matrix`)."""

    n: int
    index: np.ndarray
    start: np.ndarray
    end: np.ndarray
    windowed: np.ndarray
    steps: Sequence[Any]
    launch_count: np.ndarray
    breakdown: tuple[Any, ...]
    window_numbers: np.ndarray
    window_source: tuple[str, ...]
    gap_rows: GapRows | None
    component_names: tuple[tuple[str, ...], ...]
    component_ns: np.ndarray

    @property
    def launches(self) -> list[Any]:
        """Each step's launches."""
        return list(map(_LAUNCHES, self.steps))

    @functools.cached_property
    def host_gaps(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """The windowed steps' breakdowns' host gaps (read when first asked for: the tables ask, the rules do not)."""
        present = [b for b in self.breakdown if b is not None]
        return tuple(b.host_gaps for b in present) if self.gap_rows is None else host_gaps(self.gap_rows, len(present))

    @property
    def prefill(self) -> np.ndarray:
        return self._signature_parts[0]

    @property
    def signature(self) -> np.ndarray:
        return self._signature_parts[1]

    @property
    def signatures(self) -> list[tuple[str, ...]]:
        return self._signature_parts[2]

    @functools.cached_property
    def _signature_parts(self) -> tuple[np.ndarray, np.ndarray, list[tuple[str, ...]]]:
        """`_signatures` of the steps' launches (read when first asked for: the rules ask, the tables do not)."""
        return _signatures(self.launches, self.launch_count)

    @property
    def cpu_range_start(self) -> np.ndarray:
        return self._cpu_ranges[0]

    @property
    def cpu_range_end(self) -> np.ndarray:
        return self._cpu_ranges[1]

    @functools.cached_property
    def _cpu_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """The start and end of every step range on the host with both ends known (read when first asked for:
        only host evidence reads them)."""
        n = self.n
        times = step_times(self.steps)  # from the steps' rows, not two properties each
        range_start, range_end = times["range_start_ns"], times["range_end_ns"]
        cpu = np.fromiter(map(operator.eq, map(_SIDE, self.steps), itertools.repeat(_CPU)), bool, n)
        cpu &= (range_start != NO_TIME) & (range_end != NO_TIME)
        return range_start[cpu], range_end[cpu]

    # Made when asked for, not held: a 10M-kernel trace has 2.3M steps, 18 MB an int64 column.
    @property
    def window_start(self) -> np.ndarray:
        return self._windowed_or(0, self.start)

    @property
    def window_end(self) -> np.ndarray:
        return self._windowed_or(1, self.end)

    @property
    def wall(self) -> np.ndarray:
        """Each step's `Step.wall_ns`: its window's length, else its GPU span."""
        out: np.ndarray = self.window_end - self.window_start
        return out

    @property
    def host_long(self) -> np.ndarray:
        return self._windowed_or(ARENA_FIELDS.index("host_long_ns"), np.zeros(self.n, np.int64))

    def _windowed_or(self, field: int, default: np.ndarray) -> np.ndarray:
        """The windowed steps' `ARENA_FIELDS[field]`, `default`'s values elsewhere (a new array)."""
        out = default.copy()
        out[self.windowed] = self.window_numbers[:, field]
        return out

    def component_matrix(self, rows: np.ndarray | None = None) -> tuple[np.ndarray, list[str]]:
        """The components of the steps at `rows` (all when None) as a float matrix, a row per step and a column per
        component name those steps' breakdowns have (sorted; 0 where a step has none), and the names: filled in
        one scatter, with no dict per step nor an item at a time (10^5-10^6 steps)."""
        picked = np.arange(self.n) if rows is None else rows
        has = self.windowed[picked]
        w = self._windowed_at[picked[has]]  # the rows' places among the windowed steps
        kinds = self._kind[w]
        present = np.flatnonzero(np.bincount(kinds, minlength=len(self._kinds))).tolist() if len(w) else []
        names = sorted({c for k in present for c in self._kinds[k]})
        values = np.zeros((len(picked), len(names)))
        if not names:
            return values, names
        col = {c: j for j, c in enumerate(names)}
        # each kind's columns, one kind after the other
        kind_cols = np.array([col.get(c, -1) for t in self._kinds for c in t], np.int64)
        kind_len = np.array([len(t) for t in self._kinds], np.int64)
        kind_off = np.cumsum(kind_len) - kind_len
        counts = kind_len[kinds]
        total = int(counts.sum())
        if total:
            within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
            cols = kind_cols[np.repeat(kind_off[kinds], counts) + within]
            src = np.repeat(self._component_at[w], counts) + within
            values[np.repeat(np.flatnonzero(has), counts), cols] = self.component_ns[src].astype(float)
        return values, names

    @functools.cached_property
    def _windowed_at(self) -> np.ndarray:
        """Each step's place among the windowed steps (meaningful for those only)."""
        out: np.ndarray = np.cumsum(self.windowed) - 1
        return out

    @functools.cached_property
    def _kinds_and_codes(self) -> tuple[list[tuple[str, ...]], np.ndarray]:
        """The distinct sequences of component names (breakdowns share one tuple per sequence, found by identity)
        and each windowed step's code among them."""
        ids = np.fromiter(map(id, self.component_names), np.uint64, len(self.component_names))
        _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        return [self.component_names[i] for i in first.tolist()], inverse.reshape(-1).astype(np.int64)

    @property
    def _kinds(self) -> list[tuple[str, ...]]:
        return self._kinds_and_codes[0]

    @property
    def _kind(self) -> np.ndarray:
        return self._kinds_and_codes[1]

    @functools.cached_property
    def _component_at(self) -> np.ndarray:
        """Where each windowed step's components start in `component_ns`."""
        lengths = np.fromiter(map(len, self.component_names), np.int64, len(self.component_names))
        out: np.ndarray = np.cumsum(lengths) - lengths
        return out


def step_arrays(steps: Sequence[Any]) -> StepArrays:
    """`steps` (model.steps.Step, each with its breakdown or None) as arrays."""
    n = len(steps)
    breakdown = tuple(map(_BREAKDOWN, steps))
    times = step_times(steps)  # from the steps' rows, not two properties each
    counts = np.fromiter(map(len, map(_LAUNCHES, steps)), np.int64, n)
    starts, ends = times["start_ns"], times["end_ns"]
    windowed = np.fromiter(map(operator.is_not, breakdown, itertools.repeat(None)), bool, n)
    numbers, source, names, ns, gaps = window_fields([b for b in breakdown if b is not None])
    index = np.fromiter(map(_INDEX, steps), np.int64, n)
    return StepArrays(n=n, index=index, start=starts, end=ends, windowed=windowed,
                      steps=steps, launch_count=counts,
                      breakdown=breakdown, window_numbers=numbers, window_source=source,
                      gap_rows=gaps, component_names=names, component_ns=ns)


def _signatures(launch_lists: Sequence[Sequence[Any]], counts: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, list[tuple[str, ...]]]:
    """Per step: whether a launch is prefill or mixed, and the code of its decode attention kernels (sorted
    distinct names; -1 for none) in the list of such signatures (first-seen order)."""
    n = len(launch_lists)
    launches = list(itertools.chain.from_iterable(launch_lists))
    phases, names = columns(_LAUNCH, launches, 2)
    m = len(launches)
    heavy = np.fromiter(map(PREFILL_PHASES.__contains__, phases), bool, m)
    first = np.cumsum(counts) - counts
    has = counts > 0
    prefill = np.zeros(n, bool)
    if m:
        prefill[has] = np.logical_or.reduceat(heavy, first[has])
    name_code = {name: i for i, name in enumerate(dict.fromkeys(names))}
    signatures: list[tuple[str, ...]] = [(name,) for name in name_code]
    code = {sig: i for i, sig in enumerate(signatures)}
    signature = np.full(n, -1, np.int64)
    one = np.flatnonzero(counts == 1)  # most steps: one launch, no set to sort
    if len(one):
        head = first[one]
        lc = np.fromiter(map(name_code.__getitem__, names), np.int64, m)
        signature[one] = np.where(heavy[head], -1, lc[head])
    for i in np.flatnonzero(counts > 1).tolist():
        a = int(first[i])
        key = tuple(sorted({names[k] for k in range(a, a + int(counts[i])) if not heavy[k]}))
        if key:
            if key not in code:
                code[key] = len(signatures)
                signatures.append(key)
            signature[i] = code[key]
    return prefill, signature, signatures


def int64s(values: Sequence[int]) -> np.ndarray:
    """Python ints as an int64 array."""
    return np.fromiter(values, np.int64, len(values))
