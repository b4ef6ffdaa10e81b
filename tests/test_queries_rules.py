"""The rules' named queries over the launch relation (traceinsight.diagnose.launch_table), run on small inline
tables of attention launches against the rows they must return: the per-kernel baselines (kernel_baselines) and
each rule's candidate selection. Each table is written out here, so each test reads as the case it holds."""

from __future__ import annotations

import math
import random
import statistics
import struct
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from traceinsight.diagnose import launch_table
from traceinsight.diagnose.launch_table import SCHEMA, connect
from traceinsight.queries import sql

# Every column of attention_launches, with what a plain launch has: a decode launch of kernel 'k', split-KV
# unknown, no model, no measurement.
DEFAULT: dict[str, Any] = {
    "launch_id": 0, "step": 0, "name": "k", "kernel": "k", "family_key": None, "backend": "fi-cc",
    "phase": "decode", "split_kv": None, "dur_ns": 100, "predicted_ns": None, "balanced_ns": None,
    "simulated": False, "sm_idle_measured": None, "sm_idle_model": None, "batch_size": None,
    "batch_source": None, "b_threshold": None, "cuda_graph": False,
}


def launches(*rows: dict[str, Any]) -> duckdb.DuckDBPyConnection:
    """A connection holding these launches (pos = their order; family_key = the name unless given; names and
    families numbered in the order they first appear), set up as the rules get it (launch_table.connect)."""
    full = []
    names: dict[str, int] = {}
    families: dict[str, int] = {}
    for i, r in enumerate(rows):
        row = {**DEFAULT, "pos": i, "launch_id": i, "step": i, **r}
        row["family_key"] = row["family_key"] or row["name"]
        row["name_id"] = names.setdefault(row["name"], len(names))
        row["family_id"] = families.setdefault(row["family_key"], len(families))
        full.append(row)
    table = pa.table({f.name: pa.array([r[f.name] for r in full], f.type) for f in SCHEMA}, schema=SCHEMA)
    return connect(table)


def run(con: duckdb.DuckDBPyConnection, query: str, **params: Any) -> list[tuple[Any, ...]]:
    """The query's rows; those of a launch query (its first column pos) with the launch's kernel name put after pos,
    for reading (the queries leave the name to the rules' views)."""
    cursor = con.execute(sql(query), params)
    rows = cursor.fetchall()
    if cursor.description[0][0] != "pos":
        return rows
    names = dict(con.execute("SELECT pos, name FROM attention_launches").fetchall())
    return [(r[0], names[r[0]], *r[1:]) for r in rows]


def baselines(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[Any, ...]]:
    """kernel_baselines by family key (the family's number dropped), run again on the launches: it must give what
    `connect` stored."""
    got = {r[1]: r[2:] for r in run(con, "kernel_baselines")}
    assert got == {r[1]: r[2:] for r in con.execute("SELECT * FROM kernel_baselines").fetchall()}
    return got


# ---------------------------------------------------------------- kernel_baselines

def test_kernel_baselines_prefers_the_split_on_median() -> None:
    con = launches({"dur_ns": 100, "split_kv": True}, {"dur_ns": 300, "split_kv": True},
                   {"dur_ns": 5000, "split_kv": False}, {"dur_ns": 120, "split_kv": None})
    # 4 launches: median of 100, 120, 300, 5000 = 210; split on: 100 and 300, median 200 (an even count).
    assert baselines(con) == {"k": (4, 210.0, 2, 200.0, 200.0, "split-on median")}


def test_kernel_baselines_without_split_on_launches_takes_the_median_of_all() -> None:
    con = launches({"dur_ns": 7}, {"dur_ns": 2, "split_kv": False}, {"dur_ns": 4, "split_kv": False},
                   {"name": "other", "dur_ns": 9, "split_kv": True})
    got = baselines(con)
    assert got["k"] == (3, 4.0, 0, None, 4.0, "median")  # an unknown split state is not 'on'
    assert got["other"] == (1, 9.0, 1, 9.0, 9.0, "split-on median")


def test_kernel_baselines_groups_by_family_not_name() -> None:
    # FlashAttention-3's split and unsplit launches are two template instances of one family.
    con = launches({"name": "fa3<split>", "family_key": "fa3<128, 176, 128>", "dur_ns": 50, "split_kv": True},
                   {"name": "fa3<nosplit>", "family_key": "fa3<128, 176, 128>", "dur_ns": 900, "split_kv": False})
    assert baselines(con) == {"fa3<128, 176, 128>": (2, 475.0, 1, 50.0, 50.0, "split-on median")}


def test_kernel_baselines_median_is_pythons_statistics_median() -> None:
    # The rules used statistics.median of int durations: the middle one, or the mean of the two middle ones.
    rng = random.Random(13)
    for n in (1, 2, 3, 4, 7, 10, 101):
        durs = [rng.randrange(1, 10**10) for _ in range(n)]
        con = launches(*({"dur_ns": d, "split_kv": True} for d in durs))
        got = baselines(con)["k"]
        assert got[1] == got[3] == float(statistics.median(durs)), (n, durs)


# ---------------------------------------------------------------- slow_launches

SPLIT_OFF = {"backends": ["fi-cc"], "split_kv": False, "unsimulated": False, "ratio_min": 2.0,
             "excess_min": 100.0}


def _slow(con: duckdb.DuckDBPyConnection, **params: Any) -> list[tuple[Any, ...]]:
    """(pos, reference_ns, reference, typical_ns, ratio, excess_ns) of slow_launches."""
    return [(r[0], *r[3:]) for r in run(con, "slow_launches", **{**SPLIT_OFF, **params})]


def test_slow_launches_against_the_split_on_median() -> None:
    con = launches({"dur_ns": 100, "split_kv": True}, {"dur_ns": 100, "split_kv": True},
                   {"dur_ns": 1000, "split_kv": False}, {"dur_ns": 150, "split_kv": False})
    assert _slow(con) == [(2, 100.0, "split-on median", 100.0, 10.0, 900.0)]


def test_slow_launches_reference_is_the_model_when_it_has_one() -> None:
    # Reference = balanced_ns x dur_ns / predicted_ns; a NULL or zero balanced / predicted time falls back to the
    # family's typical time.
    con = launches({"dur_ns": 100, "split_kv": True},
                   {"dur_ns": 1000, "split_kv": False, "balanced_ns": 50, "predicted_ns": 400},
                   {"dur_ns": 1000, "split_kv": False, "balanced_ns": 0, "predicted_ns": 400},
                   {"dur_ns": 1000, "split_kv": False, "balanced_ns": 50, "predicted_ns": None},
                   {"dur_ns": 1000, "split_kv": False, "balanced_ns": 300, "predicted_ns": 400})
    assert _slow(con) == [(1, 125.0, "model", 100.0, 8.0, 875.0),
                          (2, 100.0, "split-on median", 100.0, 10.0, 900.0),
                          (3, 100.0, "split-on median", 100.0, 10.0, 900.0)]
    # pos 4: 750 ns balanced of 1000 measured is 1.33x, not slow, although 10x the typical time.


def test_slow_launches_thresholds_are_inclusive() -> None:
    con = launches({"dur_ns": 100, "split_kv": True}, {"dur_ns": 200, "split_kv": False},
                   {"dur_ns": 199, "split_kv": False})
    assert [r[0] for r in _slow(con, excess_min=100.0)] == [1]  # exactly 2x and exactly 100 ns above
    assert _slow(con, excess_min=100.5) == []
    # The typical-time check alone: a model reference that says slow does not count below 2x typical.
    con = launches({"dur_ns": 100, "split_kv": True},
                   {"dur_ns": 199, "split_kv": False, "balanced_ns": 1, "predicted_ns": 100})
    assert _slow(con, excess_min=0.0) == []


def test_slow_launches_filters_backend_split_state_and_simulation() -> None:
    con = launches({"dur_ns": 100, "split_kv": True}, {"dur_ns": 100, "split_kv": True},
                   {"dur_ns": 1000, "split_kv": None},
                   {"dur_ns": 1000, "split_kv": True},
                   {"dur_ns": 1000, "split_kv": False, "simulated": True},
                   {"dur_ns": 1000, "split_kv": False},
                   {"name": "fa2", "backend": "fi-fa2", "dur_ns": 1000, "split_kv": False},
                   {"name": "fa2", "backend": "fi-fa2", "dur_ns": 10, "split_kv": True})
    assert [r[0] for r in _slow(con)] == [4, 5]  # split off, of fi-cc
    assert [r[0] for r in _slow(con, split_kv=True)] == [3]
    assert [r[0] for r in _slow(con, unsimulated=True)] == [5]
    # Every backend, any split state (unknown included), no simulated launch: as tail-ctas asks.
    assert [r[0] for r in _slow(con, backends=None, split_kv=None, unsimulated=True)] == [2, 3, 5, 6]


def test_slow_launches_orders_kernels_by_first_appearance() -> None:
    # 'a' appears first (pos 0) but is slow only at pos 4; 'b' is slow at pos 2: 'a' still comes first.
    con = launches({"name": "a", "dur_ns": 100, "split_kv": True}, {"name": "b", "dur_ns": 100, "split_kv": True},
                   {"name": "b", "dur_ns": 900, "split_kv": False}, {"name": "b", "dur_ns": 800, "split_kv": False},
                   {"name": "a", "dur_ns": 700, "split_kv": False})
    assert [(r[0], r[1], r[2]) for r in run(con, "slow_launches", **SPLIT_OFF)] == [
        (4, "a", 0), (2, "b", 1), (3, "b", 1)]


def test_slow_launches_without_a_reference_is_never_slow() -> None:
    con = launches({"dur_ns": 0, "split_kv": True}, {"dur_ns": 0, "split_kv": False})
    assert _slow(con, excess_min=0.0) == []


# ---------------------------------------------------------------- simulated_launches

def test_simulated_launches_in_kernel_order() -> None:
    con = launches({"name": "a"}, {"name": "b", "simulated": True}, {"name": "a", "simulated": True},
                   {"name": "b", "simulated": True})
    assert run(con, "simulated_launches") == [(2, "a", 0), (1, "b", 1), (3, "b", 1)]


# ---------------------------------------------------------------- idle_launches

def test_idle_launches_prefers_the_measurement() -> None:
    con = launches({"sm_idle_measured": 0.1, "sm_idle_model": 0.9},  # measured below the bar: not the model's
                   {"sm_idle_measured": 0.5, "sm_idle_model": 0.0},
                   {"sm_idle_model": 0.2},  # exactly at the bar
                   {"sm_idle_model": 0.7, "dur_ns": 99},  # too short
                   {"name": "other"},  # neither
                   {"name": "other", "sm_idle_model": 0.6})
    assert run(con, "idle_launches", idle_min=0.2, min_ns=100.0) == [
        (1, "k", 0, 0.5, "ncu"), (2, "k", 0, 0.2, "model"), (5, "other", 1, 0.6, "model")]


# ---------------------------------------------------------------- near_threshold_launches

NEAR = {"backends": ["fi-cc"], "margin_min": 4.0, "margin_fraction": 0.1}


def test_near_threshold_launches_within_the_margin() -> None:
    on = {"split_kv": True, "b_threshold": 297}
    con = launches({**on, "batch_size": 296}, {**on, "batch_size": 297},  # at B_th: already off
                   {**on, "batch_size": 268}, {**on, "batch_size": 267},  # margin: max(4, 29.7)
                   {**on, "batch_size": 290, "split_kv": False}, {**on, "batch_size": None},
                   {**on, "batch_size": 296, "backend": "fi-fa2"},
                   {"name": "small", "split_kv": True, "b_threshold": 10, "batch_size": 6},  # margin 4
                   {"name": "small", "split_kv": True, "b_threshold": 10, "batch_size": 5},
                   {"name": "none", "split_kv": True, "b_threshold": None, "batch_size": 5})
    assert run(con, "near_threshold_launches", **NEAR) == [
        (0, "k", 0, 297, 296), (2, "k", 0, 297, 268), (7, "small", 1, 10, 6)]


@pytest.mark.parametrize("b_th", [0, None])
def test_near_threshold_launches_needs_a_threshold(b_th: int | None) -> None:
    con = launches({"split_kv": True, "b_threshold": b_th, "batch_size": 1})
    assert run(con, "near_threshold_launches", **NEAR) == []


# ---------------------------------------------------------------- prefill_named_decode_launches

def test_prefill_named_decode_launches_by_word_and_phase() -> None:
    fa2 = {"name": "BatchPrefillWithPagedKVCacheKernel<16>", "kernel": "BatchPrefillWithPagedKVCacheKernel"}
    sm90 = {"name": "PrefillWithKVCacheKernel<x>", "kernel": "PrefillWithKVCacheKernel"}
    con = launches({"name": "BatchDecodeWithPagedKVCacheKernel<>", "kernel": "BatchDecodeWithPagedKVCacheKernel"},
                   {**sm90, "phase": "unknown", "batch_source": "sidecar"},  # decode by its sidecar batch
                   {**fa2},  # decode by its phase
                   {**fa2, "phase": "unknown", "batch_source": "trace"},  # unknown, no sidecar: not judged
                   {**fa2, "phase": "unknown"},
                   {**sm90, "phase": "decode"},
                   {"name": "prefill_lowercase", "kernel": "prefill_lowercase"})  # the words are case-sensitive
    assert run(con, "prefill_named_decode_launches", words=["Prefill"]) == [
        (1, sm90["name"], 1), (5, sm90["name"], 1), (2, fa2["name"], 2)]
    assert run(con, "prefill_named_decode_launches", words=["Decode", "nothing"]) == [
        (0, "BatchDecodeWithPagedKVCacheKernel<>", 0)]


# ---------------------------------------------------------------- the relation itself

@pytest.mark.parametrize("case", ["h200_nsys", "h200_sweep", "fa3_variants_q32kv4d128_fa3_torch"])
def test_attention_launches_holds_every_launch_view(case: str) -> None:
    """launch_table.build on a real analysis (Nsight Compute matched; simulated; FlashAttention-3's families): every
    column equals what the rules read from the views (the text built as dictionaries, per kernel name)."""
    from golden import analyze_golden

    from traceinsight.diagnose.launch_table import build
    from traceinsight.diagnose.views import kernel_family, launch_views

    _, a = analyze_golden(case)
    views = launch_views(a)
    table = build(views)
    want: dict[str, list[Any]] = {
        "pos": list(range(len(views))),
        "launch_id": [v.launch.attention.kernel_id for v in views],
        "step": [v.step.index for v in views],
        "name": [v.name for v in views],
        "kernel": [v.kernel for v in views],
        "family_key": [kernel_family(v) for v in views],
        "name_id": [list(dict.fromkeys(v.name for v in views)).index(v.name) for v in views],
        "family_id": [list(dict.fromkeys(kernel_family(v) for v in views)).index(kernel_family(v)) for v in views],
        "backend": [v.backend for v in views],
        "phase": [v.launch.phase for v in views],
        "split_kv": [v.launch.split_kv for v in views],
        "dur_ns": [v.dur_ns for v in views],
        "predicted_ns": [v.model.predicted_ns if v.model else None for v in views],
        "balanced_ns": [v.model.balanced_ns if v.model else None for v in views],
        "simulated": [bool(v.model is not None and v.model.sim is not None and v.model.predicted_ns)
                      for v in views],
        "sm_idle_measured": [v.measured.sm_idle if v.measured else None for v in views],
        "sm_idle_model": [v.model.sm_idle if v.model else None for v in views],
        "batch_size": [v.batch_size for v in views],
        "batch_source": [v.batch.source if v.batch else None for v in views],
        "b_threshold": [v.threshold.b_threshold if v.threshold else None for v in views],
        "cuda_graph": [v.cuda_graph for v in views],
    }
    assert set(want) == set(SCHEMA.names) == set(table.column_names)
    for name, values in want.items():
        assert table.column(name).to_pylist() == values, name
    # The case holds what the test is for: measured idle, simulations, several FA3 names in one family.
    if case == "h200_nsys":
        assert any(x is not None for x in want["sm_idle_measured"])
    elif case == "h200_sweep":
        assert any(want["simulated"]) and any(x is not None for x in want["balanced_ns"])
    else:
        assert len(set(want["name"])) > len(set(want["family_key"]))


# ---------------------------------------------------------------- slow_path_launches, backend_medians

def test_slow_path_launches_are_the_decode_launches_of_the_slow_backends_by_name() -> None:
    con = launches({"name": "sm90", "backend": "sm90"}, {"name": "cc", "backend": "cc"},
                   {"name": "sm90b", "backend": "sm90"}, {"name": "sm90", "backend": "sm90", "phase": "prefill"},
                   {"name": "sm90", "backend": "sm90", "phase": None}, {"name": "none", "backend": None})
    assert run(con, "slow_path_launches", backends=["sm90"]) == [(0, "sm90", 0), (4, "sm90", 0), (2, "sm90b", 2)]
    assert run(con, "slow_path_launches", backends=["sm90", "cc"]) == [
        (0, "sm90", 0), (4, "sm90", 0), (1, "cc", 1), (2, "sm90b", 2)]
    assert run(con, "slow_path_launches", backends=["fa3"]) == []


def test_backend_medians_in_the_order_asked_and_as_statistics_median() -> None:
    con = launches({"backend": "fa2", "dur_ns": 100}, {"backend": "cc", "dur_ns": 7},
                   {"backend": "fa2", "dur_ns": 300}, {"backend": "fa2", "dur_ns": 301},
                   {"backend": "fa2", "dur_ns": 5}, {"backend": None, "dur_ns": 1})
    got = run(con, "backend_medians", backends=["fa2", "sm90", "cc"])
    assert got == [("fa2", 4, statistics.median([100, 300, 301, 5])), ("cc", 1, 7.0)]  # no sm90 launch: no row
    assert run(con, "backend_medians", backends=["cc", "fa2"])[0][0] == "cc"


# ---------------------------------------------------------------- kv_bandwidth_launches

KV = {"peak": 1e9, "eff_min": 0.5, "explained": []}


def _kv(con: duckdb.DuckDBPyConnection, kv_bytes: dict[int, int | None], **params: Any) -> list[tuple[Any, ...]]:
    """kv_bandwidth_launches with launch_kv_bytes = {pos: bytes} (the relation kv-bandwidth registers)."""
    con.register("launch_kv_bytes", pa.table({"pos": pa.array(list(kv_bytes), pa.int64()),
                                              "kv_bytes": pa.array(list(kv_bytes.values()), pa.int64())}))
    return run(con, "kv_bandwidth_launches", **{**KV, **params})


def _eff(kv_bytes: int, dur_ns: int, peak: float) -> float:
    """A launch's efficiency as kv-bandwidth computed it in Python."""
    return kv_bytes / (dur_ns * 1e-9) / peak


def test_kv_bandwidth_launches_selects_the_low_launches_of_kernels_with_a_low_median() -> None:
    con = launches({"dur_ns": 1000}, {"dur_ns": 1000}, {"dur_ns": 1000},  # k: 0.2, 0.3, 0.9 -> median 0.3
                   {"dur_ns": 1000}, {"dur_ns": 1000}, {"dur_ns": 0},  # k: bytes NULL, no row, no time
                   {"dur_ns": 1000, "step": 100},  # k: explained (its step's time is imbalance): not rated
                   {"name": "ok", "dur_ns": 1000}, {"name": "ok", "dur_ns": 1000},  # ok: 0.1, 0.6, 0.7 -> 0.6
                   {"name": "ok", "dur_ns": 1000})
    kv = {0: 200, 1: 300, 2: 900, 3: None, 5: 100, 6: 10, 7: 100, 8: 600, 9: 700}
    m = _eff(300, 1000, 1e9)
    assert _kv(con, kv, explained=[100, 100, 7000]) == [
        (0, "k", 0, 200, _eff(200, 1000, 1e9), m, _eff(900, 1000, 1e9)),
        (1, "k", 0, 300, m, m, _eff(900, 1000, 1e9))]
    # Step 100 not explained: k's launches are 0.01, 0.2, 0.3, 0.9, median (0.2 + 0.3) / 2, all three low.
    got = _kv(con, kv)
    assert [r[0] for r in got] == [0, 1, 6]
    assert got[0][5] == (_eff(200, 1000, 1e9) + _eff(300, 1000, 1e9)) / 2
    # 'ok' is selected once the bar is above its median: its launches below the bar, in position order.
    assert [r[:3] for r in _kv(con, kv, eff_min=0.65) if r[1] == "ok"] == [(7, "ok", 1), (8, "ok", 1)]


def test_kv_bandwidth_launches_median_below_the_bar_strictly_and_ties() -> None:
    # An even count with ties at the middle: 0.2, 0.4, 0.4, 0.8 -> median 0.4 (the two middle ones are equal).
    con = launches(*({"dur_ns": 1000} for _ in range(4)))
    kv = {0: 800, 1: 400, 2: 200, 3: 400}
    median = statistics.median(_eff(b, 1000, 1e9) for b in kv.values())
    assert median == _eff(400, 1000, 1e9)
    assert _kv(con, kv, eff_min=median) == []  # a median at the bar is not below it
    above = math.nextafter(median, math.inf)
    assert [(r[0], r[5]) for r in _kv(con, kv, eff_min=above)] == [(1, median), (2, median), (3, median)]


def test_kv_bandwidth_launches_without_launches_or_bytes() -> None:
    assert _kv(launches(), {}) == []
    con = launches({"dur_ns": 1000}, {"dur_ns": 1000})
    assert _kv(con, {}) == []
    assert _kv(con, {0: None, 1: None}) == []
    assert _kv(con, {0: 1}, explained=[0]) == []  # its one rated launch is explained


def test_kv_bandwidth_launches_median_is_pythons_statistics_median_to_the_bit() -> None:
    # Efficiencies across magnitudes, odd and even counts per kernel: the query's median is the very DOUBLE
    # statistics.median gives, and each efficiency the very DOUBLE the rule's Python computed.
    rng = random.Random(13)
    peak = 4.8e12
    rows: list[dict[str, Any]] = []
    kv: dict[int, int | None] = {}
    want: dict[str, list[float]] = {}
    for n in (1, 2, 3, 4, 5, 6, 7, 10, 101):
        for _ in range(n):
            b, d = rng.randrange(1, 10**rng.randint(3, 13)), rng.randrange(1, 10**rng.randint(1, 8))
            kv[len(rows)] = b
            rows.append({"name": f"n{n}", "dur_ns": d})
            want.setdefault(f"n{n}", []).append(_eff(b, d, peak))
    got = _kv(launches(*rows), kv, peak=peak, eff_min=math.inf)  # every rated launch of every kernel
    assert len(got) == len(rows)
    for r in got:
        assert r[4] == _eff(kv[r[0]], rows[r[0]]["dur_ns"], peak)
        effs = want[r[1]]
        assert (struct.pack("<d", r[5]), r[6]) == (struct.pack("<d", statistics.median(effs)), max(effs)), r[1]


def test_kv_bandwidth_launches_median_where_duckdbs_would_differ() -> None:
    # Two launches near the largest DOUBLE: statistics.median's (a + b) / 2 overflows to inf, so the kernel's
    # median is not below any bar and nothing is selected; DuckDB's median(efficiency) here is finite (it computes
    # the midpoint otherwise) and would have selected both.
    peak = 1e21 / 1.7e308  # 10^12 bytes in 1 ns: an efficiency of 1.7e308
    con = launches({"dur_ns": 1}, {"dur_ns": 1})
    kv = {0: 10**12, 1: 10**12}
    assert statistics.median([_eff(10**12, 1, peak)] * 2) == math.inf
    assert _kv(con, kv, peak=peak, eff_min=math.inf) == []
    # With a third launch the median is the middle one, finite: both launches below the bar are rows.
    con = launches({"dur_ns": 1}, {"dur_ns": 1}, {"dur_ns": 2})
    got = _kv(con, {**kv, 2: 10**12}, peak=peak, eff_min=math.inf)
    assert [(r[0], r[5]) for r in got] == [(0, _eff(10**12, 1, peak)), (1, _eff(10**12, 1, peak)),
                                          (2, _eff(10**12, 1, peak))]


def test_select_rows_are_python_values_batch_after_batch() -> None:
    """`launch_table._rows` gives a result's rows as tuples of Python values (None for NULL) over batches, each
    distinct text one object; the same rows as DuckDB's own fetchall."""
    n = launch_table._BATCH_ROWS + 5  # two batches
    con = duckdb.connect()
    query = ("SELECT range AS pos, (range % 3)::INT AS name_id,"
             " CASE WHEN range % 7 = 0 THEN NULL ELSE range * 0.5::DOUBLE END AS x,"
             " CASE WHEN range % 2 = 0 THEN 'even' WHEN range % 5 = 0 THEN NULL ELSE 'odd' END AS word,"
             " range % 4 = 0 AS flag FROM range($n) ORDER BY range")
    rows = list(launch_table._rows(con.sql(query, params={"n": n}).to_arrow_table()))
    assert rows == con.execute(query, {"n": n}).fetchall()
    assert {type(v) for r in rows for v in r} == {int, float, str, bool, type(None)}
    assert len({id(r[3]) for r in rows if r[3] == "even"}) <= 2  # one object per batch, not one per row
