"""A step's breakdown as the analysis holds it (`traceinsight.model.breakdown` says what it is): its window and
where its time went, as numbers in an int64 array shared by the steps of a trace."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from traceinsight.components import IDLE
from traceinsight.model.row_chunks import NULL

# One tuple per distinct sequence of component names, shared by the breakdowns that have it.
COMPONENT_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}
# StepBreakdown's numbers before its components' (start, end, host range, longest host gap, long host time, idle
# stretches), and the host range's value for None.
FIXED = 6
NO_RANGE = NULL


class BreakdownRows:
    """Where up to row_chunks.CHUNK breakdowns' numbers start (`at`, int64) in the int64 array they share (`data`)."""

    __slots__ = ("at", "data")

    def __init__(self, data: array[int], at: array[int]) -> None:
        self.data = data
        self.at = at


class StepBreakdown:
    """One step's window and where its time went (ns).

    start_ns / end_ns: the window (see the module docstring); source: 'cpu-range' | 'gpu-range' | 'gpu-span'
    (what the window was taken from); components: ns per component, adding up to wall_ns; host_range_ns: the
    step's range on the host (None without one); host_gap_max_ns: the longest stretch the GPU waited for the
    host; host_long_ns: idle-host time in stretches of at least LONG_HOST_GAP_NS; idle_stretches: how many
    separate idle stretches the window holds; host_gaps: the MAX_HOST_GAPS longest idle-host stretches of at
    least LONG_HOST_GAP_NS as (start, end).

    Its numbers (window, host range, longest host gap, long host time, idle stretches, then the components' ns,
    then how many host gaps and their (start, end) one after the other) are held in an int64 array, at `_at` in one
    shared by every step of a trace when `breakdowns` made it, beside a shared tuple of the components' names: an
    object per field and a dict of ints was 0.4 KB a step, and a long trace has 10^6 steps (the host gaps as tuples,
    ~85 bytes a step more). Where they start is a row of `BreakdownRows` (`_c`, its row `_r`: no int object of its
    own), and its source a class attribute of the subclass for that source (`sourced`). `components` gives them as a
    dict, in the order given.
    """

    __slots__ = ("_c", "_names", "_r")

    source: str

    def __init__(self, start_ns: int, end_ns: int, source: str, components: dict[str, int] | None = None,
                 host_range_ns: int | None = None, host_gap_max_ns: int = 0, host_long_ns: int = 0,
                 idle_stretches: int = 0, host_gaps: tuple[tuple[int, int], ...] = (),
                 arena: array[int] | None = None) -> None:
        """`arena`: the array to append the numbers to (shared by the steps of a trace); a new one if None."""
        components = components or {}
        names = tuple(components)
        self._names = COMPONENT_NAMES.setdefault(names, names)
        data = arena if arena is not None else array("q")
        self._c = BreakdownRows(data, array("q", [len(data)]))
        self._r = 0
        data.extend((start_ns, end_ns, NO_RANGE if host_range_ns is None else host_range_ns, host_gap_max_ns,
                     host_long_ns, idle_stretches))
        data.extend(components.values())
        data.append(len(host_gaps))
        for g in host_gaps:
            data.extend(g)
        self.__class__ = sourced(source)

    @property
    def _data(self) -> array[int]:
        """The int64 array holding the numbers."""
        return self._c.data

    @property
    def _at(self) -> int:
        """Where the numbers start in `_data`."""
        return self._c.at[self._r]

    @property
    def start_ns(self) -> int:
        c = self._c
        return c.data[c.at[self._r]]

    @property
    def end_ns(self) -> int:
        c = self._c
        return c.data[c.at[self._r] + 1]

    @property
    def host_range_ns(self) -> int | None:
        c = self._c
        v = c.data[c.at[self._r] + 2]
        return None if v == NO_RANGE else v

    @property
    def host_gap_max_ns(self) -> int:
        c = self._c
        return c.data[c.at[self._r] + 3]

    @property
    def host_long_ns(self) -> int:
        c = self._c
        return c.data[c.at[self._r] + 4]

    @property
    def idle_stretches(self) -> int:
        c = self._c
        return c.data[c.at[self._r] + 5]

    @property
    def host_gaps(self) -> tuple[tuple[int, int], ...]:
        """The longest idle-host stretches, (start, end) ns, longest first (new tuples; most steps have none)."""
        at = self._at + FIXED + len(self._names)
        n = self._data[at]
        if not n:
            return ()
        flat = self._data[at + 1:at + 1 + 2 * n]
        return tuple(zip(flat[::2], flat[1::2], strict=True))

    def _values(self) -> array[int]:
        at = self._at + FIXED
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
        end = self._at + FIXED + len(self._names)
        return self.source, self._names, tuple(self._data[self._at:end + 1 + 2 * self._data[end]])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StepBreakdown) and self._key() == other._key()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by its values (its class is its source's, made at run time), unpickled with an array of its own."""
        return (StepBreakdown, (self.start_ns, self.end_ns, self.source, self.components, self.host_range_ns,
                                self.host_gap_max_ns, self.host_long_ns, self.idle_stretches, self.host_gaps))

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"StepBreakdown(start_ns={self.start_ns}, end_ns={self.end_ns}, source={self.source!r}, "
                f"components={self.components!r}, host_range_ns={self.host_range_ns}, "
                f"host_gap_max_ns={self.host_gap_max_ns}, host_long_ns={self.host_long_ns}, "
                f"idle_stretches={self.idle_stretches}, host_gaps={self.host_gaps!r})")

    @property
    def wall_ns(self) -> int:
        c = self._c
        at = c.at[self._r]
        return c.data[at + 1] - c.data[at]

    @property
    def gpu_busy_ns(self) -> int:
        return sum(v for k, v in zip(self._names, self._values(), strict=True) if k not in IDLE)

    @property
    def idle_ns(self) -> int:
        return sum(v for k, v in zip(self._names, self._values(), strict=True) if k in IDLE)

    def get(self, component: str) -> int:
        try:
            return self._data[self._at + FIXED + self._names.index(component)]
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
        return np.fromiter((v for b in bs for v in b._data[b._at + FIXED:b._at + FIXED + len(b._names)]),
                           np.int64, total)
    (arena,) = arenas.values()
    firsts = np.fromiter((b._at for b in bs), np.int64, n) + FIXED
    offsets = np.cumsum(lengths) - lengths  # where each breakdown's values start in the result
    index = np.repeat(firsts - offsets, lengths) + np.arange(total, dtype=np.int64)
    data = np.frombuffer(arena, np.int64)
    try:
        return data[index]  # a copy: the arena's buffer is released with `data`
    finally:
        del data


# The StepBreakdown subclass of each source (its `source` a class attribute: no slot per breakdown).
_SOURCED: dict[str, type[StepBreakdown]] = {}


def sourced(source: str) -> type[StepBreakdown]:
    """The StepBreakdown subclass whose instances have this source."""
    got = _SOURCED.get(source)
    if got is None:
        got = _SOURCED[source] = type("StepBreakdown", (StepBreakdown,), {"__slots__": (), "source": source,
                                                                          "__module__": __name__})
    return got
