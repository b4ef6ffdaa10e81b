"""Columns of rows that share a few objects (`model.shared_objects`): a Coded column reads as the tuple of its rows,
and `counts` counts as Counter(zip(...)) of the rows does, in the same order."""

from __future__ import annotations

from collections import Counter

import numpy as np

from traceinsight.model import shared_objects
from traceinsight.model.shared_objects import Coded


def test_a_coded_column_reads_as_the_tuple_of_its_rows() -> None:
    grids = [(1, 2, 3), (4, 5, 6)]
    rows = [grids[i % 2] if i % 3 else None for i in range(10)]
    col = Coded.of(rows)
    assert len(col) == 10 and list(col) == rows and [col[i] for i in range(10)] == rows
    assert col.values == [None, grids[1], grids[0]] and col.codes.dtype == np.uint8  # first seen, a byte a row
    assert list(col[3:8]) == rows[3:8] and col.at(np.array([9, 0, 4])) == [rows[9], rows[0], rows[4]]


def test_a_slice_of_many_values_holds_only_its_rows_values() -> None:
    rows = [(i,) for i in range(shared_objects.FEW_VALUES + 50)]  # each row its own object
    col = Coded.of(rows)
    part = col[10:13]
    assert list(part) == rows[10:13] and part.values == rows[10:13]
    assert list(Coded.of(rows[:5])[1:3]) == rows[1:3]  # few values: the slice keeps the column's


def test_counts_count_the_rows_combinations_in_first_seen_order() -> None:
    a = "decode"
    b = "".join(["dec", "ode"])  # equal to a, another object: one key
    names = ["k1", "k2", "k1", "k2", "k1", "k3"]
    phases = [a, "prefill", b, "prefill", a, None]
    got = shared_objects.counts(Coded.of(names), Coded.of(phases))
    want = Counter(zip(names, phases, strict=True))
    assert got == want and list(got) == list(want)
    assert shared_objects.counts(Coded.of([]), Coded.of([])) == {}
