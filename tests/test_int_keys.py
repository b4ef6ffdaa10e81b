"""model.int_keys: batch lookups of int64 keys, dict(zip(...)) over arrays, and the int map and sorted ints a finding
holds its many steps in, against the dict and tuple they replace."""

from __future__ import annotations

import pickle

import numpy as np

from traceinsight.model.int_keys import IntMap, KeyIndex, SortedInts, first_of, last_of


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


def test_int_map_reads_as_the_dict_it_replaces() -> None:
    """IntMap: keys, values and items (read from its arrays) in the dict's order, lookups, equality both ways."""
    keys, values = np.array([30, 10, 20], np.int64), np.array([3, 1, 2], np.int64)
    got, want = IntMap(keys, values), {30: 3, 10: 1, 20: 2}
    assert got == want and want == got and dict(got) == want and got != {30: 3}
    assert list(got) == list(got.keys()) == [30, 10, 20] and list(got.values()) == [3, 1, 2]
    assert list(got.items()) == list(want.items()) and got[10] == 1 and 11 not in got and 20 in got
    assert all(type(k) is int for k in got) and all(type(v) is int for v in got.values())
    assert IntMap.of(want) == got and IntMap.of(got) is got and len(got) == 3


def test_first_of_is_setdefault_over_the_maps_in_turn() -> None:
    a, b, c = IntMap.of({5: 1, 2: 2}), IntMap.of({2: 9, 7: 3, 5: 8}), IntMap.of({1: 4, 7: 0})
    want: dict[int, int] = dict(a)
    for m in (b, c):
        for k, v in m.items():
            want.setdefault(k, v)
    got = first_of(a, b, c)
    assert list(got.items()) == list(want.items()) == [(5, 1), (2, 2), (7, 3), (1, 4)]
    assert first_of(a) is a


def test_sorted_ints_read_as_the_tuple_they_replace() -> None:
    want = (2, 5, 9, 400)
    got = SortedInts(np.array(want, np.int64))
    assert got == want and want == got and tuple(got) == want and list(got) == list(want) and len(got) == 4
    assert got[0] == 2 and got[-1] == 400 and got[1:3] == (5, 9) and got[:1] == (2,) and type(got[0]) is int
    assert 9 in got and 10 not in got and -1 not in got and 401 not in got and "9" not in got
    assert got != (2, 5, 9) and got == SortedInts(np.array(want, np.int64)) and hash(got) == hash(want)
    assert set(got) == set(want) and repr(got) == repr(want) and pickle.loads(pickle.dumps(got)) == want
