"""The store's sliced, compressed insert (store.CHECKPOINT_TEXT_BYTES): a table carrying more text than the limit
goes in slices, each compressed by a checkpoint before the next. The rows, their ids and their order must be
exactly those of one insert; and the in-memory database must hold the compressed size afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import H200

from traceinsight.ingest import nsys_sqlite, store
from traceinsight.ingest.base import Ingest
from traceinsight.ingest.store import TraceDB

EXPORT = H200 / "flashinfer_decode.sqlite"


def _ingest(path: Path) -> TraceDB:
    db = TraceDB()
    db.add(nsys_sqlite.read(path), path, consume=True)
    return db


def _table_bytes(db: TraceDB) -> int:
    query = "SELECT sum(memory_usage_bytes) FROM duckdb_memory() WHERE tag = 'IN_MEMORY_TABLE'"
    return db.con.execute(query).fetchone()[0]


def test_sliced_insert_equals_one_insert(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _ingest(EXPORT)
    # The kernels' names are held once each (kernel_names), not in their rows: the launches' and memory
    # operations' names are the text inserted per row here.
    names = whole.con.sql("SELECT name FROM launches UNION ALL SELECT name FROM memops").to_arrow_table()
    text = store._text_bytes(names)
    assert text > 6_000
    assert whole.con.sql("SELECT count(*) FROM kernel_names").fetchall() == [(6,)]  # 70 kernels, 6 names
    monkeypatch.setattr(store, "CHECKPOINT_TEXT_BYTES", 500)  # ~6 slices of the launches, ~8 of the memops
    monkeypatch.setattr(store, "ROW_GROUP_ROWS", 4)  # each slice whole groups of 4 rows (DuckDB's are 122,880)
    sliced = _ingest(EXPORT)
    for table in ("kernels", "memops", "launches", "ranges", "devices"):
        query = f"SELECT * FROM {table} ORDER BY ALL"
        assert sliced.con.execute(query).fetchall() == whole.con.execute(query).fetchall(), table
    ids = "SELECT kernel_id, start_ns FROM kernels"  # ids in start order, rows stored in id order
    assert sliced.con.execute(ids).fetchall() == whole.con.execute(ids).fetchall()
    assert sliced.rows("SELECT warnings FROM traces") == whole.rows("SELECT warnings FROM traces")


def test_a_sliced_insert_holds_its_text_compressed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table of long repeated names (as the kernels' were before kernel_names held them once): the checkpoints
    of its slices compressed what they covered, where one insert holds every name as inserted."""
    import pyarrow as pa

    n = 20_000
    names = pa.array([f"{'templated<' * 30}{i % 7}" for i in range(n)], pa.string())

    def loaded() -> TraceDB:
        wide = _ranges(list(range(n)), list(range(1, n + 1)), arrow=True)
        wide.tables["ranges"]["name"] = names
        db = TraceDB()
        db.add(wide, Path("inline"))
        return db

    whole = loaded()
    monkeypatch.setattr(store, "CHECKPOINT_TEXT_BYTES", 1_000_000)  # ~6 slices of ~6 MB of names
    sliced = loaded()
    query = "SELECT * FROM ranges ORDER BY range_id"
    assert sliced.con.execute(query).fetchall() == whole.con.execute(query).fetchall()
    assert _table_bytes(sliced) < _table_bytes(whole) / 2


def test_text_bytes_counts_each_row_of_a_dictionary() -> None:
    import pyarrow as pa

    names = pa.DictionaryArray.from_arrays(pa.array([0, 1, 1, None], pa.int32()), pa.array(["ab", "wxyz"]))
    plain = pa.array(["abc", None, "d", ""])
    assert store._text_bytes(pa.table({"n": names, "p": plain, "i": pa.array([1, 2, 3, 4])})) == 2 + 4 + 4 + 3 + 1


def _kineto_db(path: Path) -> TraceDB:
    from traceinsight.ingest import kineto

    db = TraceDB()
    db.add(kineto.read(path), path, consume=True)
    return db


def _ranges(start: list[int], end: list[int], arrow: bool = False) -> Ingest:
    import pyarrow as pa

    n = len(start)
    cols = {"name": [f"r{i}" for i in range(n)], "kind": ["cpu"] * n, "side": ["host"] * n, "start_ns": start,
            "end_ns": end, "process_id": [1] * n, "thread_id": [2] * n, "device_id": [None] * n,
            "stream_id": [None] * n}
    ingest = Ingest(format="kineto")
    ingest.tables["ranges"] = {k: pa.array(v, pa.string() if k in ("name", "kind", "side") else pa.int64())
                               for k, v in cols.items()} if arrow else cols  # type: ignore[assignment]
    return ingest


@pytest.mark.parametrize("trace", [H200 / "flashinfer_decode_small.pt.trace.json.gz",
                                   H200 / "flashinfer_decode_sweep.pt.trace.json.gz"])
def test_a_short_table_ordered_by_the_insert_equals_the_arrow_sort(trace: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Below COMPUTE_MIN_ROWS the insert itself puts the rows in start order (these traces' ranges are not): the
    same rows, ids and stored order as pyarrow's stable sort gives."""
    by_insert = _kineto_db(trace)
    monkeypatch.setattr(store, "COMPUTE_MIN_ROWS", 0)
    by_arrow = _kineto_db(trace)
    for table in ("kernels", "memops", "launches", "ranges", "devices"):
        query = f"SELECT * FROM {table}"  # the stored order too
        assert by_insert.con.execute(query).fetchall() == by_arrow.con.execute(query).fetchall(), table


@pytest.mark.parametrize("how", ["lists", "arrow", "arrow sort"])
def test_ties_keep_the_readers_order(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python lists and short Arrow tables are ordered by the insert; long Arrow tables by pyarrow's sort."""
    if how == "arrow sort":
        monkeypatch.setattr(store, "COMPUTE_MIN_ROWS", 0)
    db = TraceDB()
    path = Path("ties.json")
    #                    r0  r1  r2  r3  r4  r5  r6
    db.add(_ranges([5, 1, 5, 1, 0, 5, 1], [9, 4, 9, 7, 3, 6, 4], arrow=how != "lists"), path)
    got = db.con.execute("SELECT name, range_id FROM ranges").fetchall()
    # start ascending, end descending, ties in the reader's order; ids in that order
    assert [n for n, _ in got] == ["r4", "r3", "r1", "r6", "r0", "r2", "r5"]
    assert [i for _, i in got] == list(range(7))
    db.add(_ranges([3, 2], [4, 5], arrow=how != "lists"), path, attach_to=0)  # more rows of the trace: ids go on
    assert db.con.execute("SELECT name, range_id FROM ranges WHERE range_id >= 7").fetchall() == [
        ("r1", 7), ("r0", 8)]


def test_text_bytes_reads_a_slice_and_long_strings() -> None:
    import pyarrow as pa

    assert store._text_bytes(pa.table({"s": pa.array(["abc", "de", None, "f"]).slice(1)})) == 3
    assert store._text_bytes(pa.table({"s": pa.array(["abc", "de"], pa.large_string()).slice(1)})) == 2
    names = pa.DictionaryArray.from_arrays(pa.array([0, 1, 1, 0], pa.int32()), pa.array(["ab", "wxyz"])).slice(2)
    assert store._text_bytes(pa.table({"n": names})) == 4 + 2
