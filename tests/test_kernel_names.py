"""Kernel names held once per trace (`kernel_names`), each kernel's as a `name_id` in `kernel_rows`, and the view
`kernels` giving every kernel its names back, in the stored order, whatever the reader and however many traces."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from traceinsight.ingest import cache, nsys_sqlite, read_file, save
from traceinsight.ingest.kernel_names import NameIds
from traceinsight.ingest.store import TraceDB

NSYS = "flashinfer_decode.sqlite"
KINETO = "flashinfer_decode_small.pt.trace.json.gz"


def _pairs(db: TraceDB, trace: int) -> list[tuple[int, str, str | None]]:
    return db.sql("SELECT kernel_id, name, mangled_name FROM kernels WHERE trace_id = $t", {"t": trace}).fetchall()


def _read(path: Path, slice_rows: int | None = None) -> tuple[list[tuple[int, str, str | None]], TraceDB, int]:
    """The (start order, name, mangled name) the reader gives each kernel, and a database holding the trace."""
    ingest = nsys_sqlite.read(path, slice_rows) if path.suffix == ".sqlite" else read_file(path)[0]
    given = None if slice_rows else ingest.lists("kernels")
    db = TraceDB()
    trace = db.add(ingest, path)
    got = _pairs(db, trace)
    if given is not None:  # the reader's own names, in start order (ties in reading order)
        n = len(given["name"])
        order = sorted(range(n), key=lambda i: (given["start_ns"][i], -given["end_ns"][i]))
        mangled = given.get("mangled_name") or [None] * n
        assert got == [(k, given["name"][i], mangled[i]) for k, i in enumerate(order)]
    return got, db, trace


def test_each_kernel_keeps_its_names_and_order_and_each_pair_is_held_once(h200: Path) -> None:
    for path, slice_rows in ((h200 / NSYS, None), (h200 / NSYS, 7), (h200 / KINETO, None)):
        got, db, trace = _read(path, slice_rows)
        assert [r[0] for r in got] == list(range(len(got))) and len(got) > 40  # kernel_id order, as stored
        names = db.sql("SELECT name, mangled_name FROM kernel_names WHERE trace_id = $t", {"t": trace}).fetchall()
        assert sorted(names, key=str) == sorted({(n, m) for _, n, m in got}, key=str)  # each pair once
        kept = db.sql("SELECT k.kernel_id, n.name, n.mangled_name FROM kernel_rows k JOIN kernel_names n "
                      "USING (trace_id, name_id) ORDER BY k.kernel_id").fetchall()
        assert kept == got
    nsys = _read(h200 / NSYS)[0]
    assert nsys == _read(h200 / NSYS, 7)[0] and any(m for _, _, m in nsys)  # the sliced read: the same names


def _db_with(path: Path) -> TraceDB:
    db = TraceDB()
    db.add(read_file(path)[0], path)
    return db


def test_traces_of_one_database_and_a_saved_trace_keep_their_names(h200: Path, tmp_path: Path) -> None:
    db = TraceDB()
    first = db.add(read_file(h200 / KINETO)[0], h200 / KINETO)
    second = db.add(nsys_sqlite.read(h200 / NSYS, 7), h200 / NSYS)
    ids = db.sql("SELECT trace_id, min(name_id), max(name_id), count(*) FROM kernel_names GROUP BY ALL "
                 "ORDER BY trace_id").fetchall()
    assert ids[0][1] == 0 and ids[1][1] == ids[0][2] + 1  # numbered across traces, each trace's in one run
    assert all(hi - lo + 1 == n for _, lo, hi, n in ids)
    before = _pairs(db, second)
    db.save_trace(second, tmp_path / "saved.duckdb")
    again = db.add_saved(tmp_path / "saved.duckdb", h200 / NSYS)
    assert _pairs(db, again) == before and _pairs(db, first) == _pairs(_db_with(h200 / KINETO), 0)
    alone = TraceDB()
    assert _pairs(alone, alone.add_saved(tmp_path / "saved.duckdb", h200 / NSYS)) == before


def test_name_ids_number_distinct_pairs_from_dictionary_codes_and_strings() -> None:
    ids = NameIds(5)
    names = pa.chunked_array([pa.array(v).dictionary_encode() for v in (["a", "b", "a", "c"], ["b", "a"])])
    mangled = pa.chunked_array([pa.array(["_a", None, "_a", "_c", "x"]), pa.array([None], pa.string())])  # cut apart
    column = ids.column(names, mangled, 6)
    assert column.to_pylist() == [5, 6, 5, 7, 8, 9]
    assert ids.take_new() == [(5, "a", "_a"), (6, "b", None), (7, "c", "_c"), (8, "b", "x"), (9, "a", None)]
    assert ids.column(["b", "a", "d"], [None, "_a", None], 3) == [6, 5, 10]  # Python values: the same pairs' ids
    assert ids.take_new() == [(10, "d", None)]
    assert ids.column(["a"], None, 1) == [9]  # no mangled names given: (name, None)


def test_a_trace_whose_name_ids_are_split_by_another_is_not_cached_and_the_analysis_goes_on(
        h200: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Name ids are numbered across traces and `kernels` reads them by position, so a saved trace needs its own to
    follow one another; a trace given a new name after another trace's (a writer outside the readers) is not saved
    into the ingest cache, and nothing raises: the cache is best effort."""
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(tmp_path / "cache"))
    db = TraceDB()
    first = db.add(read_file(h200 / KINETO)[0], h200 / KINETO)
    db.add(nsys_sqlite.read(h200 / NSYS, 7), h200 / NSYS)
    late = db.name_id(first, "a kernel named after the second trace's")
    assert late == db.sql("SELECT max(name_id) FROM kernel_names").fetchone()[0]
    save(db, [(first, h200 / KINETO)])
    assert not cache.entry_path(h200 / KINETO).exists()
    assert not list((tmp_path / "cache").rglob("*.tmp*"))  # no half-written entry left
