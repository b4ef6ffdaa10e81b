"""Kernels' names held once per trace: the store turns a reader's `name` and `mangled_name` columns into a
`name_id` into `kernel_names` (schema.sql), which the `kernels` view reads back.

A million FlashInfer kernels carry ~870 MB of names (each row repeats a ~400-character templated name, with its
mangled name) for a few hundred distinct ones: DuckDB expanded them into strings per row on insert and compressed
them again at each checkpoint. The ids are numbered here from the distinct (name, mangled_name) pairs, on the
readers' dictionary codes (nsys) or Python strings (Kineto, ncu), without a Python value per row of an Arrow column.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from traceinsight.ingest.arrow_numpy import COMPUTE_MIN_ROWS, ints

# A pair of a name and its mangled name (None when the trace lacks it).
Pair = tuple[Any, Any]


class NameIds:
    """The name ids of one trace: each distinct (name, mangled_name) pair numbered from `next_id` on (the ids it
    `known` keep theirs); `pending` holds the pairs numbered since `take_new` last handed them over."""

    def __init__(self, next_id: int, known: dict[Pair, int] | None = None) -> None:
        self.ids: dict[Pair, int] = dict(known or {})
        self.next = next_id
        self.pending: list[tuple[int, Any, Any]] = []

    def of(self, pair: Pair) -> int:
        got = self.ids.get(pair)
        if got is None:
            got = self.ids[pair] = self.next
            self.pending.append((self.next, pair[0], pair[1]))
            self.next += 1
        return got

    def take_new(self) -> list[tuple[int, Any, Any]]:
        new, self.pending = self.pending, []
        return new

    def column(self, names: Any, mangled: Any, n: int) -> list[int] | pa.Array:
        """The name id of each of `n` rows of the columns `names` and `mangled` (Python lists or Arrow arrays;
        `mangled` None: not given): a list for lists of fewer than COMPUTE_MIN_ROWS rows (the store's insert of
        Python values), else an int32 Arrow array."""
        if isinstance(names, list) and (mangled is None or isinstance(mangled, list)):
            of = self.of
            pairs = zip(names, [None] * n if mangled is None else mangled, strict=True)
            ids = [of(p) for p in pairs]
            return ids if n < COMPUTE_MIN_ROWS else _int32(np.asarray(ids, np.int32))
        if isinstance(names, list):
            names = pa.array(names, pa.string())
        if isinstance(mangled, list):
            mangled = pa.array(mangled, pa.string())
        parts = [self._arrow(a, b) for a, b in _aligned(names, mangled, n)]
        return _int32(np.concatenate(parts) if parts else np.zeros(0, np.int32))

    def _arrow(self, names: pa.Array, mangled: pa.Array | None) -> np.ndarray:
        """Name ids (int32) of one chunk of Arrow rows: the pairs of dictionary codes made distinct in numpy, the
        strings of each distinct pair looked up once."""
        n_codes, n_values = _codes(names)
        m_codes, m_values = np.full(len(names), -1, np.int64), list[Any]()
        if mangled is not None:
            m_codes, m_values = _codes(mangled)
        width = len(m_values) + 1
        keys = (n_codes + 1) * width + (m_codes + 1)
        size = (len(n_values) + 1) * width
        if size <= 4 * len(keys) + 1024:  # a lookup table: no sort
            seen = np.zeros(size, bool)
            seen[keys] = True
            distinct = np.flatnonzero(seen)
            where = np.zeros(size, np.int64)
            where[distinct] = np.arange(len(distinct))
            inverse = where[keys]
        else:
            distinct, inverse = np.unique(keys, return_inverse=True)
        ids = np.empty(len(distinct), np.int32)
        for i, key in enumerate(distinct.tolist()):
            a, b = divmod(key, width)
            ids[i] = self.of((n_values[a - 1] if a else None, m_values[b - 1] if b else None))
        return ids[inverse.reshape(-1)]


def _int32(values: np.ndarray) -> pa.Array:
    """An int32 numpy array as an Arrow array (not through `pa.array`: see store.arrow_table)."""
    return pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(np.ascontiguousarray(values))])


def _codes(column: pa.Array) -> tuple[np.ndarray, list[Any]]:
    """A string column as (codes, values): each row's index into `values` (int64, -1 for NULL)."""
    if not pa.types.is_dictionary(column.type):
        import pyarrow.compute as pc  # 70 ms to import: only for long plain-string columns

        column = pc.dictionary_encode(column)
    return ints(column.indices, -1).astype(np.int64, copy=False), column.dictionary.to_pylist()


def _aligned(names: pa.Array | pa.ChunkedArray, mangled: pa.Array | pa.ChunkedArray | None,
             n: int) -> list[tuple[pa.Array, pa.Array | None]]:
    """The two columns as pairs of arrays of the same rows (chunked arrays cut where either has a chunk edge)."""
    if mangled is None:
        chunks = names.chunks if isinstance(names, pa.ChunkedArray) else [names]
        return [(c, None) for c in chunks]
    table = pa.table({"n": names, "m": mangled})
    return [(b.column(0), b.column(1)) for b in table.to_batches()] if n else []


def known(rows: list[tuple[Any, Any, Any]]) -> dict[Pair, int]:
    """The ids of `kernel_names` rows (name_id, name, mangled_name) already in the database."""
    return {(name, mangled): int(name_id) for name_id, name, mangled in rows}
