"""The store's sliced, compressed insert (store.CHECKPOINT_TEXT_BYTES): a table carrying more text than the limit
goes in slices, each compressed by a checkpoint before the next. The rows, their ids and their order must be
exactly those of one insert; and the in-memory database must hold the compressed size afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import H200

from traceinsight.ingest import nsys_sqlite, store
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
    text = store._text_bytes(whole.con.sql("SELECT name, mangled_name FROM kernels").to_arrow_table())
    assert text > 60_000  # 70 kernels of FlashInfer's long templated names
    monkeypatch.setattr(store, "CHECKPOINT_TEXT_BYTES", 10_000)  # ~7 slices of the kernel table
    sliced = _ingest(EXPORT)
    for table in ("kernels", "memops", "launches", "ranges", "devices"):
        query = f"SELECT * FROM {table} ORDER BY ALL"
        assert sliced.con.execute(query).fetchall() == whole.con.execute(query).fetchall(), table
    ids = "SELECT kernel_id, start_ns FROM kernels"  # ids in start order, rows stored in id order
    assert sliced.con.execute(ids).fetchall() == whole.con.execute(ids).fetchall()
    assert sliced.rows("SELECT warnings FROM traces") == whole.rows("SELECT warnings FROM traces")
    assert _table_bytes(sliced) < _table_bytes(whole)  # the checkpoints compressed what they covered


def test_text_bytes_counts_each_row_of_a_dictionary() -> None:
    import pyarrow as pa

    names = pa.DictionaryArray.from_arrays(pa.array([0, 1, 1, None], pa.int32()), pa.array(["ab", "wxyz"]))
    plain = pa.array(["abc", None, "d", ""])
    assert store._text_bytes(pa.table({"n": names, "p": plain, "i": pa.array([1, 2, 3, 4])})) == 2 + 4 + 4 + 3 + 1
