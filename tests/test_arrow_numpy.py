"""ingest/arrow_numpy.py: reading Arrow arrays without pyarrow's pandas- or compute-importing conversions. Short
columns are encoded in Python, long ones (or any once pyarrow.compute is loaded) by pyarrow: the same values."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from traceinsight.ingest import arrow_numpy
from traceinsight.ingest.arrow_numpy import encode, python_values, sorted_distinct

COLUMNS = [
    pa.array(["b", "a", None, "b", "c", "a", None]),
    pa.array(["x", "yy", "x"], pa.large_string()),
    pa.array([7, 300, None, 300, 7, 1000]),
    pa.array(["b", "a", "b", "c"]).slice(1),
    pa.array([], pa.string()),
]


@pytest.mark.parametrize("column", COLUMNS, ids=lambda c: str(c.type))
def test_short_and_long_columns_encode_alike(column: pa.Array, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrow_numpy, "_pyarrow_encodes", lambda rows: False)  # in Python
    short = encode(column)
    values = python_values(column, shared_ints=True)
    monkeypatch.setattr(arrow_numpy, "_pyarrow_encodes", lambda rows: True)
    long = encode(column)
    assert short[0] == long[0] and short[1].tolist() == long[1].tolist()
    assert short[1].dtype == long[1].dtype == np.int64
    assert values == python_values(column, shared_ints=True) == column.to_pylist()


def test_equal_values_are_one_object() -> None:
    values = python_values(pa.array([300 + i % 2 for i in range(6)]), shared_ints=True)
    assert values[0] is values[2] is values[4] and values[1] is values[3]
    texts = python_values(pa.array(["".join(["ab", "c"]) for _ in range(3)]))
    assert texts[0] is texts[1] is texts[2]


def test_sorted_distinct_is_numpys_unique() -> None:
    a = np.array([5, 1, 5, 3, 1, -2])
    assert sorted_distinct(a).tolist() == np.unique(a).tolist() == [-2, 1, 3, 5]
    assert sorted_distinct(np.array([], np.int64)).tolist() == []


@pytest.mark.parametrize("values", [[7, -(2**63) + 1, 2**63 - 1, 0], [None, 5, None, -3], [None, None], []],
                         ids=["ints", "with-none", "all-none", "empty"])
def test_int_array_reads_a_sequence_and_an_iterator_alike(values: list[int | None]) -> None:
    """`int_array` reads a sequence without a Python frame per value (a None count first) and any other iterable a
    value at a time: both give pyarrow's own int64 array, NULL where None."""
    want = pa.array(values, pa.int64())
    from_list = arrow_numpy.int_array(values, len(values))
    from_tuple = arrow_numpy.int_array(tuple(values), len(values))
    from_iter = arrow_numpy.int_array(iter(values), len(values))
    for got in (from_list, from_tuple, from_iter):
        assert got.type == pa.int64() and got.equals(want), got
        assert got.null_count == values.count(None)


def test_int64_array_without_a_copy_reads_the_array_itself_when_it_can() -> None:
    values = np.arange(10, dtype=np.int64) * 7
    own = arrow_numpy.int64_array(values[2:8], copy=False)  # int64 in one piece: the array's own buffer
    copied = arrow_numpy.int64_array(values[2:8])
    values[2] = -1
    assert own.to_pylist()[0] == -1 and copied.to_pylist()[0] == 14  # the caller's promise: no change meanwhile
    for other in (values[::2], values.astype(np.int32)):  # strided, or another width: made int64 in one piece
        assert arrow_numpy.int64_array(other, copy=False).to_pylist() == other.tolist()
    valid = np.array([True, False, True])
    assert arrow_numpy.int64_array(np.array([1, 2, 3]), valid, copy=False).to_pylist() == [1, None, 3]
