"""Fuzzing the Nsight Systems SQLite reader through the whole analysis, and its salvage of truncated exports.

Generated exports use the CREATE statements of the real nsys 2025.3 export (`fuzz_corpus.nsys_schema`); mutated
ones put wrong types, int64 edges, blobs and non-UTF-8 text in the columns, drop tables and columns. Every input
analyzes or fails with a one-line TraceInsightError (`fuzz_corpus.check_input`).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from fuzz_corpus import (
    NSYS_REAL,
    NsysSpec,
    _kernel_row,
    build_nsys_sqlite,
    check_built,
    check_bytes,
    cut_sqlite,
    fuzz_settings,
    mutated_nsys,
    nsys_spec,
    real_bytes,
    scratch,
)
from hypothesis import given

from traceinsight.ingest import load, nsys_export, nsys_query, nsys_sqlite, sqlite_salvage

PAGE = 4096  # page size of the real export (header bytes 16-17)


@fuzz_settings(40)
@given(nsys_spec())
def test_generated_nsys_exports_analyze(spec: NsysSpec) -> None:
    out = check_built("gen.sqlite", lambda p: build_nsys_sqlite(p, spec))
    assert out.kind == "ok", out.message
    assert out.kernels == len(spec.rows["CUPTI_ACTIVITY_KIND_KERNEL"])
    assert out.ranges == len(spec.rows["NVTX_EVENTS"])


@fuzz_settings(150)
@given(mutated_nsys())
def test_mutated_nsys_exports(spec: NsysSpec) -> None:
    check_built("mut.sqlite", lambda p: build_nsys_sqlite(p, spec))


@fuzz_settings(100)
@given(cut_sqlite())
def test_real_exports_cut_or_damaged(case: tuple[bytes, str]) -> None:
    data, _ = case
    check_bytes(data, "cut.sqlite")


def _rows(path: Path, table: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
    finally:
        con.close()


def test_salvage_of_an_intact_export_copies_every_row(tmp_path: Path) -> None:
    """The page walker reads the real export exactly as SQLite does (compared row by row with sqlite3)."""
    dest = tmp_path / "copy.sqlite"
    report = sqlite_salvage.rebuild(NSYS_REAL, dest, nsys_export.SALVAGE_TABLES)
    assert not report.truncated and report.bad_pages == 0
    # sqlite3 on the real file: 70 kernels, 484 runtime calls, 16 NVTX events, 318 strings, 1 GPU
    assert report.rows["CUPTI_ACTIVITY_KIND_KERNEL"] == 70 and report.rows["CUPTI_ACTIVITY_KIND_RUNTIME"] == 484
    for table in ("StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS",
                  "TARGET_INFO_GPU", "META_DATA_EXPORT"):  # fmt: skip
        assert _rows(dest, table) == _rows(NSYS_REAL, table), table


def _cut(tmp_path: Path, pages: int) -> Path:
    path = tmp_path / "cut.sqlite"
    path.write_bytes(real_bytes(NSYS_REAL)[: pages * PAGE])
    return path


def test_truncated_export_keeps_the_rows_before_the_cut(tmp_path: Path) -> None:
    """Cut after page 40 of 90 (the schema table's later pages and META_DATA_EXPORT, page 90, are gone; sqlite3
    refuses the file): the kernel table's pages (26, 39, 40 by `dbstat`) and the NVTX page (31) survive, so all
    70 kernels and 16 ranges are read, and the first warning says where the file ends."""
    path = _cut(tmp_path, 40)
    with pytest.raises(sqlite3.DatabaseError):
        sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True).execute("SELECT * FROM sqlite_master").fetchall()
    ingest = nsys_sqlite.read(path)
    full = nsys_sqlite.read(NSYS_REAL)
    assert ingest.lists("kernels") == full.lists("kernels")  # the same 70 kernels, column by column
    assert len(ingest.tables["ranges"]["name"]) == 16
    assert ingest.warnings[0].startswith(
        "cut.sqlite is truncated at byte 163840 of 368640 (page 40 of 90): read what precedes the damage, 70 kernels"
    )
    assert ingest.format_version is None  # META_DATA_EXPORT (page 90) is lost


def test_truncated_export_with_the_kernel_pages_gone(tmp_path: Path) -> None:
    """Cut after page 28: the kernel table's root (26) survives but its leaves (39, 40) do not: no kernels, said
    so in the warning; before page 26 the kernel table itself is lost: a one-line FormatError."""
    ingest = nsys_sqlite.read(_cut(tmp_path, 28))
    assert ingest.lists("kernels")["name"] == [] and "0 kernels (no kernel survived)" in ingest.warnings[0]
    with pytest.raises(nsys_sqlite.FormatError) as info:
        nsys_sqlite.read(_cut(tmp_path, 25))
    assert "kernel table (CUPTI_ACTIVITY_KIND_KERNEL) is not readable" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("pages", [40, 88])
def test_truncated_export_through_load(tmp_path: Path, pages: int) -> None:
    """Through the public `load`: after page 40 the schema table is cut, after page 88 only META_DATA_CAPTURE's
    page 89 and META_DATA_EXPORT's page 90 are gone; both keep all 70 kernels (sqlite3 count on the whole file)."""
    db, (trace,) = load([_cut(tmp_path, pages)], cache=False)
    assert db.rows("SELECT count(*) AS n FROM kernels")[0]["n"] == 70
    warnings = db.rows("SELECT warnings FROM traces WHERE trace_id = $t", {"t": trace})[0]["warnings"]
    assert warnings[0].startswith(f"cut.sqlite is truncated at byte {pages * PAGE} of 368640 (page {pages} of 90)")


def test_sparse_rowids_and_bad_values_read_quickly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rowids 1, 2, 2^62 with slices of 2 rows (a rowid-range loop would take 2^61 queries), and rows whose
    values SQLite kept as text/real/blob: rows with unusable start/end are skipped and counted, bad grid cells
    read as NULL."""
    monkeypatch.setattr(nsys_query, "FETCH_ROWS", 2)
    spec = NsysSpec(rows={"StringIds": [{"id": 10, "value": "my_kernel"}]})
    good = _kernel_row(1000, 50, 1, 10, (132, 1, 1))
    text_grid = {**_kernel_row(2000, 50, 2, 10, (132, 1, 1)), "gridX": "abc", "blockY": 2**40}
    real_start = {**_kernel_row(3000, 50, 3, 10, (132, 1, 1)), "start": 3000.5}
    backwards = {**_kernel_row(4000, 50, 4, 10, (132, 1, 1)), "end": 10}
    spec.rows["CUPTI_ACTIVITY_KIND_KERNEL"] = [good, text_grid, real_start, backwards]
    with scratch("sparse.sqlite") as path:
        build_nsys_sqlite(path, spec)
        con = sqlite3.connect(path)
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET rowid = 4611686018427387904 WHERE rowid = 4")
        con.commit()
        con.close()
        started = time.monotonic()
        ingest = nsys_sqlite.read(path)
        assert time.monotonic() - started < 5
    kernels = ingest.lists("kernels")
    assert kernels["start_ns"] == [1000, 2000]
    assert kernels["grid_x"] == [132, None] and kernels["block_y"] == [8, None]
    assert "2 kernels skipped: start/end not integers, or end before start (CUPTI_ACTIVITY_KIND_KERNEL)" in (
        ingest.warnings
    )


def test_non_positive_gpu_properties_read_as_unknown() -> None:
    """An SM count of 0 or a warp size of 0 would divide by zero in the occupancy model: read as NULL."""
    spec = NsysSpec(rows={"StringIds": [{"id": 10, "value": "my_kernel"}]})
    spec.rows["CUPTI_ACTIVITY_KIND_KERNEL"] = [_kernel_row(1000, 50, 1, 10, (132, 1, 1))]
    from fuzz_corpus import nsys_real_rows

    cols, rows = nsys_real_rows("TARGET_INFO_GPU")
    gpu = dict(zip(cols, rows[0], strict=True))
    spec.rows["TARGET_INFO_GPU"] = [{**gpu, "smCount": 0, "threadsPerWarp": -32}]
    out = check_built("gpu.sqlite", lambda p: build_nsys_sqlite(p, spec))
    assert out.kind == "ok", out.message
    with scratch("gpu.sqlite") as path:
        build_nsys_sqlite(path, spec)
        devices = nsys_sqlite.read(path).tables["devices"]
    assert devices["num_sms"] == [None] and devices["warp_size"] == [None] and devices["name"] == ["NVIDIA H200"]
