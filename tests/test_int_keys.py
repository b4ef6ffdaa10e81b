"""model.int_keys: batch lookups of int64 keys and dict(zip(...)) over arrays, against the dict they replace."""

from __future__ import annotations

import numpy as np

from traceinsight.model.int_keys import KeyIndex, last_of


def test_find_matches_a_dict_of_positions_in_and_out_of_order() -> None:
    for keys in ([5, 9, 12], [12, 5, 9, -3], [], [7]):
        column = np.array(keys, np.int64)
        where = {k: i for i, k in enumerate(keys)}
        asked = np.array([9, 4, 12, -3, 13, 5, 7, -10], np.int64)
        got = KeyIndex(column).find(asked).tolist()
        assert got == [where.get(k, -1) for k in asked.tolist()], keys


def test_last_of_keeps_the_first_place_and_the_last_value() -> None:
    keys, values = np.array([3, 1, 3, 2, 1], np.int64), np.array([10, 20, 30, 40, 50], np.int64)
    k, v = last_of(keys, values)
    assert dict(zip(k.tolist(), v.tolist(), strict=True)) == dict(zip(keys.tolist(), values.tolist(), strict=True))
    assert k.tolist() == [3, 1, 2] and v.tolist() == [30, 50, 40]
    k, v = last_of(np.array([2, 0, 1], np.int64), np.array([7, 8, 9], np.int64))  # distinct, out of order
    assert k.tolist() == [2, 0, 1] and v.tolist() == [7, 8, 9]
