"""Nsight Systems exports read a slice at a time (`nsys_sqlite.read(path, slice_rows)`, `Ingest.slices`): the
database is the same, row for row and in the same order, as when every table is read at once, with the same
warnings in the same order; also where the kernels are not in start order and where a value of another type
stops the Arrow driver partway through a table."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES, FOREIGN, H200
from test_graphs import _graph_level_export
from test_nsys import _altered

from traceinsight.ingest import nsys_sqlite
from traceinsight.ingest.schema import table_names
from traceinsight.ingest.store import TraceDB

FLASHINFER = H200 / "flashinfer_decode.sqlite"
EXPORTS = [FLASHINFER, FOREIGN / "fuser_h200_report1.sqlite", FOREIGN / "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"]
# CUDA graphs replayed with --cuda-graph-trace=node: graph kernels under cudaGraphLaunch calls.
GRAPHS = EXAMPLES / "collected" / "serving_q64kv8d128_graph_nsys.sqlite"


def _database(path: Path, slice_rows: int | None) -> dict[str, list[tuple]]:
    ingest = nsys_sqlite.read(path, slice_rows)
    assert bool(ingest.slices) == (slice_rows is not None)
    db = TraceDB()
    db.add(ingest, path, consume=True)
    out = {t: db.sql(f"SELECT * EXCLUDE (size_bytes) FROM {t}" if t == "traces" else f"SELECT * FROM {t}").fetchall()
           for t in table_names()}
    db.con.close()
    return out


def _same(path: Path, slice_rows: int) -> dict[str, list[tuple]]:
    whole, sliced = _database(path, None), _database(path, slice_rows)
    for table in whole:
        assert sliced[table] == whole[table], table
    return whole


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: p.stem)
def test_sliced_read_is_the_whole_read(path: Path, h200: Path) -> None:
    whole = _same(path, 7)
    assert whole["kernels"] and whole["launches"]


def _copy(tmp_path: Path, edit: str) -> Path:
    return _altered(FLASHINFER, tmp_path / "edited.sqlite", edit)


def test_kernels_out_of_start_order(tmp_path: Path, h200: Path) -> None:
    # The kernel rows rewritten latest-first: every slice out of order, and each after a later one.
    path = _copy(tmp_path, "CREATE TABLE k AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start DESC;"
                           "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL;"
                           "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM k; DROP TABLE k;")
    ingest = nsys_sqlite.read(path, 5)
    assert "kernels" in ingest.slices
    with pytest.raises(ValueError, match="a slice at a time"):  # not held by the reader: never an empty table
        ingest.lists("kernels")
    _same(path, 5)


def test_a_value_of_another_type_partway(tmp_path: Path, h200: Path) -> None:
    # A REAL in gridX and a TEXT end of a late kernel: the driver stops there; the read goes on from the last slice.
    path = _copy(tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = 1.5 WHERE rowid = 60;"
                           "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET \"end\" = 'x' WHERE rowid = 65;")
    _same(path, 8)
    db = TraceDB()
    db.add(nsys_sqlite.read(path, 8), path, consume=True)
    (warned,) = db.sql("SELECT warnings FROM traces").fetchone()
    assert any("1 kernels skipped" in w for w in warned), warned
    assert db.sql("SELECT count(*) FROM kernels WHERE grid_x IS NULL").fetchone() == (1,)


def test_graph_replays_from_the_slices_kept(tmp_path: Path, h200: Path) -> None:
    # The graph launches and graph kernels are kept from the slices as they pass: the same replays (node mode,
    # and graph level: hidden replays, with their warning) as from the whole tables.
    whole = _same(GRAPHS, 9)
    assert len(whole["graph_replays"]) == 100
    dest = tmp_path / "graph_level.sqlite"
    _graph_level_export(GRAPHS, dest)
    assert len(_same(dest, 9)["graph_replays"]) == 100


def test_longer_than_counts_rows_not_the_rowid_span(tmp_path: Path) -> None:
    import sqlite3

    con = sqlite3.connect(tmp_path / "rows.sqlite")
    con.execute("CREATE TABLE sparse (x INTEGER)")
    con.executemany("INSERT INTO sparse (rowid, x) VALUES (?, 0)", [(i,) for i in (-5, 3, 100, 1000)])
    con.execute("CREATE TABLE dense (x INTEGER)")
    con.executemany("INSERT INTO dense (rowid, x) VALUES (?, 0)", [(i,) for i in range(7, 17)])
    con.execute("CREATE TABLE empty (x INTEGER)")
    longer = nsys_sqlite._longer_than
    assert [longer(con, "sparse", n) for n in (2, 3, 4, 1005)] == [True, True, False, False]
    assert [longer(con, "dense", n) for n in (8, 9, 10, 11)] == [True, True, False, False]
    assert not longer(con, "empty", 0)
    con.close()
