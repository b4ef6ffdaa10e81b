"""Int64 keys (kernel ids, step indexes) looked up many at a time, for mappings that cover every launch or step
(10^6-10^7) without a Python int per key (`schedule.LaunchModels`, `diagnose.rootcause.StepBudget`): where a batch
of keys is among a column of distinct keys (one sort, none when they are already increasing), and
`dict(zip(keys, values))`'s semantics over arrays."""

from __future__ import annotations

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
