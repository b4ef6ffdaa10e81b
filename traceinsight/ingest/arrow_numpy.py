"""Arrow arrays (DuckDB's results) as numpy arrays and Python values, read from their buffers.

pyarrow's own conversions (`Array.to_numpy`, even zero-copy; `pa.scalar`, and so `fill_null`) import pandas when
it is installed: a third of a second of a fresh process, for a check that never applies here
(tests/test_startup.py). These read the buffers instead; they take a slice's offset into account.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa


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


def python_values(column: pa.Array) -> list[Any]:
    """`column`'s values as Python objects (None for NULL): numbers and booleans through numpy; text through a
    dictionary, so each distinct text is one Python object however many rows hold it; other types by pyarrow."""
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        encoded = column.dictionary_encode()
        words = np.array([*encoded.dictionary.to_pylist(), None], dtype=object)
        return list(words[ints(encoded.indices, len(words) - 1)])
    if not column.null_count and (pa.types.is_integer(kind) or pa.types.is_floating(kind)
                                  or pa.types.is_boolean(kind)):
        values: list[Any] = numbers(column).tolist()
        return values
    return list(column.to_pylist())


def _bits(column: pa.Array, buffer: int) -> np.ndarray:
    """A bit-packed buffer of an Arrow array (0: validity, 1: a boolean's values) as numpy booleans."""
    bits = np.unpackbits(np.frombuffer(column.buffers()[buffer], np.uint8), bitorder="little")
    return bits[column.offset:column.offset + len(column)].astype(bool)
