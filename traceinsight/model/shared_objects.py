"""Objects many rows share (a step's batch, a launch model, a kernel's view shape), grouped by identity: what a
column of 10^5-10^6 rows reads once per distinct object instead of once per row."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
import pyarrow as pa

from traceinsight.ingest.arrow_numpy import int64_array


def distinct(values: Sequence[Any]) -> tuple[list[Any], np.ndarray]:
    """The distinct objects of `values` by identity, in first-seen order, and each row's index among them (int64).
    No __eq__ or __hash__ of theirs is called: numpy over their ids."""
    first, codes = first_rows(values)
    return [values[i] for i in first.tolist()], codes


def first_rows(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """`distinct`'s groups as rows: the first row of each distinct object (in first-seen order) and each row's
    group."""
    n = len(values)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ids = np.fromiter(map(id, values), np.int64, n)
    _, first, codes = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # by id -> first-seen
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    return first[order].astype(np.int64), rank[codes.reshape(-1)]


def small_codes(codes: np.ndarray, count: int) -> np.ndarray:
    """`codes` (positions among `count` values) in the narrowest unsigned dtype that holds them."""
    kind = np.uint8 if count <= 1 << 8 else np.uint16 if count <= 1 << 16 else np.uint32
    return codes.astype(kind)


# A Coded column of more distinct values than this is sliced over only the values its rows hold (`Coded.present`).
FEW_VALUES = 256


class Coded(Sequence[Any]):
    """A column of rows that share a few objects: row i is values[codes[i]]. It reads as the tuple of the rows
    would (len, index, slice, iterate) without a reference per row: 10^6 launches' kernel names, phases or grids
    are a byte each (`codes`) and the few distinct objects once (`values`, which may repeat a value)."""

    __slots__ = ("codes", "values")

    def __init__(self, values: Sequence[Any], codes: np.ndarray) -> None:
        self.values = values
        self.codes = codes

    @classmethod
    def of(cls, rows: Sequence[Any]) -> Coded:
        """`rows` (objects shared by identity) coded: their distinct objects in first-seen order (`distinct`)."""
        values, codes = distinct(rows)
        return cls(values, small_codes(codes, len(values)))

    def __len__(self) -> int:
        return len(self.codes)

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> Coded: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):  # over only its rows' values when the column has many: a slice reads them once
            part = Coded(self.values, self.codes[i])
            return part.present() if len(self.values) > FEW_VALUES else part
        return self.values[self.codes[i]]

    def __iter__(self) -> Iterator[Any]:
        return map(self.values.__getitem__, self.codes.tolist())

    def at(self, rows: np.ndarray) -> list[Any]:
        """The values of these rows, as a list."""
        return list(map(self.values.__getitem__, self.codes[rows].tolist()))

    def present(self) -> Coded:
        """The same rows coded over only the values they hold (a slice of a column of many distinct values)."""
        used, codes = np.unique(self.codes, return_inverse=True)
        return Coded([self.values[i] for i in used.tolist()], small_codes(codes.reshape(-1), len(used)))



def counts(*columns: Coded) -> dict[tuple[Any, ...], int]:
    """How many rows hold each combination of these columns' values (rows zipped), in first-seen order: what
    `Counter(zip(*columns))` counts, from the codes (no tuple per row)."""
    if not columns or not len(columns[0]):
        return {}
    key = np.zeros(len(columns[0]), np.int64)
    for c in columns:  # the codes as one mixed-radix int64 (a few distinct values each)
        key = key * len(c.values) + c.codes
    _, first, count = np.unique(key, return_index=True, return_counts=True)
    out: dict[tuple[Any, ...], int] = {}
    for i in np.argsort(first, kind="stable").tolist():
        row = int(first[i])
        values = tuple(c.values[c.codes[row]] for c in columns)
        out[values] = out.get(values, 0) + int(count[i])
    return out


# Columns of rows that take their values from shared objects: row i holds values[codes[i]] (one value per distinct
# object, None as NULL), as the Arrow arrays `ingest.arrow_numpy`'s int_array / float_array / bool_array build
# from the rows' own values.


def ints_of(values: Sequence[int | None], codes: np.ndarray) -> pa.Array:
    """Integers (or None) per object as an int64 Arrow array of the rows."""
    got = np.array([0 if v is None else v for v in values], np.int64)[codes]
    return int64_array(got, np.array([v is not None for v in values], bool)[codes])


def floats_of(values: Sequence[float | None], codes: np.ndarray) -> pa.Array:
    """Numbers (or None) per object as a float64 Arrow array of the rows."""
    got = np.array([0.0 if v is None else v for v in values], np.float64)[codes]
    return _with_validity(pa.float64(), np.array([v is not None for v in values], bool)[codes], got)


def bools_of(values: Sequence[bool | None], codes: np.ndarray) -> pa.Array:
    """Booleans (or None) per object as a bool Arrow array of the rows."""
    return bool_codes(np.array([2 if v is None else 1 if v else 0 for v in values], np.int8)[codes])


def bool_codes(codes: np.ndarray) -> pa.Array:
    """0 / 1 / 2 (False / True / None) per row as a bool Arrow array (None as NULL)."""
    return _with_validity(pa.bool_(), codes != 2, np.packbits(codes == 1, bitorder="little"))


def _with_validity(kind: pa.DataType, valid: np.ndarray, data: np.ndarray) -> pa.Array:
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(kind, len(valid), [validity, pa.py_buffer(data)])
