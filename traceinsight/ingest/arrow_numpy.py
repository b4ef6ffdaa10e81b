"""Arrow arrays (DuckDB's results) as numpy arrays and Python values, read from their buffers.

pyarrow's own conversions (`Array.to_numpy`, even zero-copy; `pa.scalar`, and so `fill_null`) import pandas when
it is installed: a third of a second of a fresh process, for a check that never applies here
(tests/test_startup.py). These read the buffers instead; they take a slice's offset into account.
"""

from __future__ import annotations

import itertools
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

# Rows from which pyarrow.compute's kernels do the work (dictionary encoding, `TraceDB`'s sort); below it numpy,
# Python or DuckDB do it without importing pyarrow.compute, which takes 70 ms, a tenth of a small trace's analysis.
COMPUTE_MIN_ROWS = 100_000


def valid(column: pa.Array) -> np.ndarray:
    """Which rows of `column` hold a value (numpy booleans)."""
    if not column.null_count:
        return np.ones(len(column), bool)
    return _bits(column, 0)


def numbers(column: pa.Array) -> np.ndarray:
    """A number or boolean Arrow array without NULLs as numpy: a view of its buffer (booleans unpacked)."""
    if pa.types.is_boolean(column.type):
        return _bits(column, 1)
    width = column.type.bit_width // 8
    code = "f" if pa.types.is_floating(column.type) else "i" if pa.types.is_signed_integer(column.type) else "u"
    return np.frombuffer(column.buffers()[1], np.dtype(f"{code}{width}"), len(column), column.offset * width)


def ints(column: pa.Array, null: int) -> np.ndarray:
    """An integer Arrow array as numpy (a view of its buffer when it has no NULL), NULL as `null`."""
    values = numbers(column)
    return values if not column.null_count else np.where(valid(column), values, null)


def text_bytes(column: pa.Array) -> int:
    """Bytes of text the rows of a string column hold (a dictionary of strings: each row's entry; NULL rows none);
    0 for a column of another type. Read from the offsets, without pyarrow.compute (70 ms to import)."""
    kind = column.type
    if pa.types.is_dictionary(kind) and pa.types.is_string(kind.value_type):
        lengths = _lengths(column.dictionary)
        codes = ints(column.indices, -1)
        return int(lengths[codes[codes >= 0]].sum())
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        lengths = _lengths(column)
        return int(lengths.sum() if not column.null_count else lengths[valid(column)].sum())
    return 0


def _lengths(column: pa.Array) -> np.ndarray:
    """Each row's length in bytes of a string or large_string array, from its offsets."""
    width = np.int64 if pa.types.is_large_string(column.type) else np.int32
    offsets = np.frombuffer(column.buffers()[1], width, len(column) + 1, column.offset * np.dtype(width).itemsize)
    return np.diff(offsets).astype(np.int64, copy=False)


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of `values`, sorted: `np.unique(values)` without the masked-array check it makes when
    asked for the values alone, which imports numpy.ma (15 ms of a fresh process)."""
    return np.unique(values, return_index=True)[0]


def encode(column: pa.Array) -> tuple[list[Any], np.ndarray]:
    """`column` dictionary-encoded: its distinct values in the order they first occur, and each row's position
    among them (int64; -1 for NULL). Short columns are encoded in Python, without importing pyarrow.compute, unless
    something imported it already (the nsys reader, a long table's sort): then pyarrow encodes a short column too,
    four times faster (a long trace's steps come in record batches of 65K rows)."""
    if _pyarrow_encodes(len(column)):
        encoded = column.dictionary_encode()
        return encoded.dictionary.to_pylist(), ints(encoded.indices, -1).astype(np.int64, copy=False)
    index: dict[Any, int] = {}
    codes = np.fromiter((-1 if v is None else index.setdefault(v, len(index)) for v in column.to_pylist()),
                        np.int64, len(column))
    return list(index), codes


def _pyarrow_encodes(rows: int) -> bool:
    """Whether pyarrow.compute encodes a column of `rows` rows (four times faster than Python, 70 ms to import)."""
    return rows >= COMPUTE_MIN_ROWS or "pyarrow.compute" in sys.modules


def python_values(column: pa.Array, shared_ints: bool = False) -> list[Any]:
    """`column`'s values as Python objects (None for NULL): numbers and booleans through numpy; text (and, with
    `shared_ints`, integers) through a dictionary, so each distinct value is one Python object however many rows
    hold it (a Python int past 256 is 32 bytes a row; a column of grid sizes or stream ids holds a few distinct);
    other types by pyarrow."""
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or (shared_ints and pa.types.is_integer(kind)):
        words, codes = encode(column)
        return list(np.array([*words, None], dtype=object)[codes])  # NULL (-1): the last, None
    if not column.null_count and (pa.types.is_integer(kind) or pa.types.is_floating(kind)
                                  or pa.types.is_boolean(kind)):
        values: list[Any] = numbers(column).tolist()
        return values
    return list(column.to_pylist())


def _bits(column: pa.Array, buffer: int) -> np.ndarray:
    """A bit-packed buffer of an Arrow array (0: validity, 1: a boolean's values) as numpy booleans."""
    bits = np.unpackbits(np.frombuffer(column.buffers()[buffer], np.uint8), bitorder="little")
    return bits[column.offset:column.offset + len(column)].astype(bool)


# --- Python values to Arrow arrays, built from numpy buffers (not through `pa.array`, which imports pandas) ---

def first_seen_codes(values: Sequence[str | None]) -> tuple[list[str | None], np.ndarray]:
    """The distinct values (in first-seen order) and each value's index among them."""
    distinct = list(dict.fromkeys(values))
    index = {w: i for i, w in enumerate(distinct)}
    return distinct, np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))


def int64_array(values: np.ndarray, valid: np.ndarray | None = None, copy: bool = True) -> pa.Array:
    """An int64 numpy array as an Arrow array (NULL where `valid` is False), from its buffer: a copy of it, or
    (`copy` False) the array itself when it is int64 in one piece, for a caller that changes it no more while the
    Arrow array lives (a table slice built and inserted at once: no second copy of 10^5 rows per column)."""
    validity = None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    data = values.astype(np.int64) if copy else np.ascontiguousarray(values, np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [validity, pa.py_buffer(data)])


_NULL_INT = np.iinfo(np.int64).min  # where an int column holds None while it is built (no launch's value)
# Where a float column holds None while it is built: a quiet NaN of a payload no value has (a NaN value stays NaN).
_NULL_FLOAT_BITS = 0x7FF8_0000_0000_0BAD
_NULL_FLOAT = float(np.array(_NULL_FLOAT_BITS, np.int64).view(np.float64))


def none_count(values: Sequence[Any]) -> int:
    """How many of `values` are None (by identity: no __eq__ per value)."""
    return list(map(id, values)).count(id(None))


def int_array(values: Iterable[int | None], n: int, nullable: bool = True) -> pa.Array:
    """n integers or None as an int64 Arrow array with NULLs, built in one numpy pass (no Python list).
    `nullable` False: integers only (no NULL to look for, a little faster). A sequence is counted for None first
    (by identity) and read without a Python frame per value."""
    if not nullable or isinstance(values, Sequence) and none_count(values) == 0:
        return int64_array(np.fromiter(values, np.int64, n))
    if isinstance(values, Sequence):
        obj = np.array(values, object)
        obj[obj == None] = _NULL_INT  # noqa: E711 (elementwise on an object array)
        got = obj.astype(np.int64)
    else:
        got = np.fromiter((_NULL_INT if x is None else x for x in values), np.int64, n)
    return int64_array(got, got != _NULL_INT)


def float_array(values: Iterable[float | None], n: int) -> pa.Array:
    """n floats or None as a float64 Arrow array with NULLs, in one numpy pass: None is held as a NaN of a payload
    no arithmetic makes (`_NULL_FLOAT`) while it is built, so a NaN value stays a NaN."""
    got = np.fromiter((_NULL_FLOAT if x is None else x for x in values), np.float64, n)
    valid = got.view(np.int64) != _NULL_FLOAT_BITS
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.float64(), n, [validity, pa.py_buffer(got)])


def text_array(values: Iterable[str | None], n: int) -> pa.DictionaryArray:
    """n texts or None (a few distinct ones) as an Arrow dictionary array, numbered in one numpy pass."""
    index: defaultdict[str | None, int] = defaultdict(itertools.count().__next__)  # numbered as first seen, in C
    codes = np.fromiter(map(index.__getitem__, values), np.int64, n)
    return dictionary_array(list(index), codes)


def bool_array(values: Iterable[bool | None], n: int) -> pa.Array:
    """n booleans or None as a bool Arrow array with NULLs (0 / 1 / 2 for False / True / None while built)."""
    got = np.fromiter((2 if x is None else 1 if x else 0 for x in values), np.int8, n)
    valid = got != 2
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), n, [validity, pa.py_buffer(np.packbits(got == 1, bitorder="little"))])


def dictionary_array(words: Sequence[str | None], codes: np.ndarray) -> pa.DictionaryArray:
    """Text as an Arrow dictionary array: row i holds words[codes[i]] (each distinct word stored once: a
    kernel's full name runs to hundreds of bytes, and a long trace launches the same few kernels 10^6 times).
    Built from buffers, not through `pa.array`, which imports pandas when it is installed (see
    `traceinsight.ingest.store.arrow_table`)."""
    distinct, remap = first_seen_codes(words)  # words may repeat (a family key shared by names) or hold None
    texts = [w.encode() for w in distinct if w is not None]
    offsets = np.zeros(len(texts) + 1, dtype=np.int32)
    np.cumsum([len(t) for t in texts], out=offsets[1:])
    dictionary = pa.Array.from_buffers(pa.string(), len(texts),
                                       [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(texts))])
    null = distinct.index(None) if None in distinct else len(distinct)
    # distinct index -> dictionary index (the texts skip None), or -1 for None
    to_text = np.array([-1 if i == null else i - (i > null) for i in range(len(distinct))], dtype=np.int32)
    rows = to_text[remap][codes] if len(codes) else np.zeros(0, dtype=np.int32)
    valid = rows >= 0
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    indices = pa.Array.from_buffers(pa.int32(), len(rows), [validity, pa.py_buffer(np.maximum(rows, 0))])
    return pa.DictionaryArray.from_arrays(indices, dictionary)


def string_array(values: Iterable[str | None], n: int) -> pa.Array:
    """n texts or None (mostly distinct ones) as an Arrow string array, from one buffer of their UTF-8."""
    texts = [None if v is None else v.encode() for v in values]
    lengths = np.fromiter((-1 if t is None else len(t) for t in texts), np.int64, n)
    valid = lengths >= 0
    np.maximum(lengths, 0, out=lengths)
    data = b"".join([t for t in texts if t is not None]) if not valid.all() else b"".join(texts)  # type: ignore[arg-type]
    kind, width = (pa.string(), np.int32) if len(data) < 2**31 else (pa.large_string(), np.int64)
    offsets = np.zeros(n + 1, width)
    np.cumsum(lengths, out=offsets[1:])
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(kind, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])


def list_array(lengths: np.ndarray, values: pa.Array, valid: np.ndarray | None = None) -> pa.Array:
    """An Arrow list array: row i holds the next lengths[i] of `values` (NULL where `valid` is False, with length
    0)."""
    n = len(lengths)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    validity = None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.list_(values.type), n, [validity, pa.py_buffer(offsets)], children=[values])


def python_array(values: Sequence[Any]) -> pa.Array:
    """Python values as the Arrow array `pa.array` would infer for them (None as NULL; booleans, ints, ints and
    floats as float64, texts, lists of such values), built from buffers; anything else through `pa.array`."""
    n = len(values)
    kinds = {type(v) for v in values} - {type(None)}
    try:
        if not kinds:
            return pa.nulls(n)
        if kinds == {bool}:
            return bool_array(values, n)
        if kinds == {int}:
            return int_array(values, n)
        if kinds <= {int, float}:
            return float_array(values, n)
        if kinds == {str}:
            return string_array(values, n)
        if kinds <= {list, tuple}:
            flat = [x for v in values if v is not None for x in v]
            lengths = np.fromiter((0 if v is None else len(v) for v in values), np.int64, n)
            return list_array(lengths, python_array(flat), np.fromiter((v is not None for v in values), np.bool_, n))
    except OverflowError:  # an int beyond int64: pa.array says what it makes of it
        pass
    return pa.array(values)
