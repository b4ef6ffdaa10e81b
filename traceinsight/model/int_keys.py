"""Int64 keys (kernel ids, step indexes) looked up many at a time, for mappings that cover every launch or step
(10^6-10^7) without a Python int per key (`schedule.LaunchModels`, `IntMap`): where a batch of keys is among a
column of distinct keys (one sort, none when they are already increasing), `dict(zip(keys, values))`'s semantics
over arrays, and the two containers a finding holds its many steps in (`IntMap`, `SortedInts`)."""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from typing import overload

import numpy as np


def last_of(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`dict(zip(keys, values))` as arrays: each key once, where it first comes, with its last value."""
    n = len(keys)
    if n < 2 or bool((keys[1:] > keys[:-1]).all()):  # increasing: already distinct (the pipeline's numbering)
        return keys, values
    _, first = np.unique(keys, return_index=True)
    _, last_reversed = np.unique(keys[::-1], return_index=True)
    order = np.argsort(first, kind="stable")
    return keys[first[order]], values[(n - 1 - last_reversed)[order]]


def first_of(*maps: IntMap) -> IntMap:
    """The maps one after the other as one, each key once where it first comes, with its first value (a dict
    filled by `setdefault` from each map in turn)."""
    if len(maps) == 1:
        return maps[0]
    keys = np.concatenate([m.keys_ for m in maps])
    values = np.concatenate([m.values_ for m in maps])
    _, first = np.unique(keys, return_index=True)
    at = np.sort(first)
    return IntMap(keys[at], values[at])


class KeyIndex:
    """Where keys are in a column of distinct int64 keys."""

    __slots__ = ("_order", "_sorted")

    def __init__(self, keys: np.ndarray) -> None:
        in_order = len(keys) < 2 or bool((keys[1:] > keys[:-1]).all())
        self._order: np.ndarray | None = None if in_order else np.argsort(keys, kind="stable")
        self._sorted = keys if self._order is None else keys[self._order]

    def find(self, keys: np.ndarray) -> np.ndarray:
        """Each of `keys`' position in the column (int64), -1 where the column has it not."""
        n = len(self._sorted)
        if not n:
            return np.full(len(keys), -1, np.int64)
        at = np.minimum(np.searchsorted(self._sorted, keys), n - 1)
        pos = at if self._order is None else self._order[at]
        return np.where(self._sorted[at] == keys, pos, -1)


class IntMap(Mapping[int, int]):
    """int -> int as two int64 arrays, read-only: `keys_` (distinct) and `values_`, in the order of a dict with the
    same items (equal to one). Without a Python int per key: a root cause's budgets cover every step, a finding's
    savings step by step may name 10^5-10^6 (`diagnose.rootcause.StepBudget`, `Finding.step_saving_ns`). Its
    keys, values and items are read from the arrays (not a lookup per key)."""

    __slots__ = ("keys_", "values_", "_index")

    def __init__(self, keys: np.ndarray, values: np.ndarray) -> None:
        self.keys_, self.values_ = keys, values
        self._index: KeyIndex | None = None

    @classmethod
    def of(cls, mapping: Mapping[int, int]) -> IntMap:
        """`mapping` as an IntMap (itself when it is one)."""
        if isinstance(mapping, IntMap):
            return mapping
        n = len(mapping)
        return cls(np.fromiter(mapping.keys(), np.int64, n), np.fromiter(map(int, mapping.values()), np.int64, n))

    @classmethod
    def last_of(cls, keys: np.ndarray, values: np.ndarray) -> IntMap:
        """`dict(zip(keys, values))` as arrays: each key once, where it first comes, with its last value."""
        return cls(*last_of(keys, values))

    def positions(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each of `keys` is among the keys, for those the map holds, and which of `keys` those are."""
        if self._index is None:
            self._index = KeyIndex(self.keys_)
        pos = self._index.find(keys)
        held = pos >= 0
        return pos[held], held

    def __getitem__(self, key: int) -> int:
        pos, _ = self.positions(np.array([key], np.int64))
        if not len(pos):
            raise KeyError(key)
        return int(self.values_[pos[0]])

    def __iter__(self) -> Iterator[int]:
        return iter(self.keys_.tolist())

    def __len__(self) -> int:
        return len(self.keys_)

    def keys(self) -> KeysView[int]:
        return _Keys(self)

    def values(self) -> ValuesView[int]:
        return _Values(self)

    def items(self) -> ItemsView[int, int]:
        return _Items(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.items())!r})"


class _Keys(KeysView[int]):
    _mapping: IntMap

    def __iter__(self) -> Iterator[int]:
        return iter(self._mapping.keys_.tolist())


class _Values(ValuesView[int]):
    _mapping: IntMap

    def __iter__(self) -> Iterator[int]:
        return iter(self._mapping.values_.tolist())


class _Items(ItemsView[int, int]):
    _mapping: IntMap

    def __iter__(self) -> Iterator[tuple[int, int]]:
        m = self._mapping
        return zip(m.keys_.tolist(), m.values_.tolist(), strict=True)


class SortedInts(Sequence[int]):
    """Distinct ints in ascending order as one int64 array, read as a tuple of them (equal to that tuple; a slice is
    a tuple): a finding's steps, which may be 10^5-10^6 (8 bytes each instead of a tuple's pointer and an int)."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array  # int64, ascending, distinct

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[int, ...]: ...

    def __getitem__(self, i: int | slice) -> int | tuple[int, ...]:
        if isinstance(i, slice):
            return tuple(self.array[i].tolist())
        return int(self.array[i])

    def __len__(self) -> int:
        return len(self.array)

    def __iter__(self) -> Iterator[int]:
        return iter(self.array.tolist())

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int | np.integer):
            return False
        at = int(np.searchsorted(self.array, value))
        return at < len(self.array) and int(self.array[at]) == value

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SortedInts):
            return bool(np.array_equal(self.array, other.array))
        if isinstance(other, tuple):
            return len(other) == len(self.array) and other == tuple(self.array.tolist())
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self.array.tolist()))

    def __repr__(self) -> str:
        return repr(tuple(self.array.tolist()))
