"""Objects many rows share (a step's batch, a launch model, a kernel's view shape), grouped by identity: what a
column of 10^5-10^6 rows reads once per distinct object instead of once per row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
