"""The per-file cache of normalized databases (traceinsight/ingest/cache.py, `load(..., cache=...)`).

Every test points $TRACEINSIGHT_CACHE_DIR at its own temporary folder and copies the real trace it uses into a
temporary folder (so that it may touch or rewrite it); the expected counts (1074 kernels and 1,318,666,032 ns
of kernel time in the sweep, 70 kernels in the nsys export) are those of tests/test_kineto.py and of
`sqlite3 flashinfer_decode.sqlite "select count(*) from CUPTI_ACTIVITY_KIND_KERNEL"`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from traceinsight.ingest import TraceDB, cache, load

SWEEP = "flashinfer_decode_sweep.pt.trace.json.gz"
NSYS = "flashinfer_decode.sqlite"
TABLES = ("traces", "devices", "kernels", "launches", "ranges", "memops")


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(folder))
    monkeypatch.setenv("TRACEINSIGHT_CACHE_MIN_BYTES", "0")  # the real traces are small: cache them anyway
    monkeypatch.delenv("TRACEINSIGHT_CACHE", raising=False)
    return folder


def copy(src: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy2(src, folder / src.name))


def entries(cache_dir: Path) -> list[Path]:
    folder = cache_dir / "db"
    return sorted(folder.iterdir()) if folder.exists() else []


def dump(db: TraceDB, trace_id: int) -> dict[str, list[tuple]]:
    """Every row of every table of one trace, trace_id and the file's path left out."""
    out = {}
    for table in TABLES:
        cur = db.con.execute(f"SELECT * EXCLUDE (trace_id) FROM {table} WHERE trace_id = {trace_id} ORDER BY ALL")
        out[table] = cur.fetchall()
    return out


def test_second_load_hits_the_cache(cache_dir: Path, h200: Path, tmp_path: Path) -> None:
    trace = copy(h200 / SWEEP, tmp_path / "in")
    db1, (t1,) = load([trace])
    (entry,) = entries(cache_dir)
    assert entry.name.startswith(SWEEP) and entry.suffix == ".duckdb"
    before = entry.stat()
    os.utime(entry, ns=(before.st_atime_ns, before.st_mtime_ns - 10**9))  # one second older
    db2, (t2,) = load([trace])
    after = entry.stat()
    assert entries(cache_dir) == [entry]  # nothing new written
    assert after.st_ino == before.st_ino  # the same file was read, not rewritten
    assert after.st_mtime_ns > before.st_mtime_ns - 10**9  # ... and marked used (least-recently-used pruning)
    assert dump(db1, t1) == dump(db2, t2)
    assert db2.rows("SELECT count(*) AS n, sum(dur_ns) AS d FROM kernels")[0] == {"n": 1074, "d": 1_318_666_032}
    row = db2.rows("SELECT path, size_bytes, format FROM traces")[0]
    assert row == {"path": str(trace.resolve()), "size_bytes": trace.stat().st_size, "format": "kineto"}
    assert not [p for p in entry.parent.iterdir() if p.name.endswith((".tmp", ".wal"))]  # written atomically


def test_a_modified_file_misses(cache_dir: Path, h200: Path, tmp_path: Path) -> None:
    trace = copy(h200 / NSYS, tmp_path / "in")
    db1, (t1,) = load([trace])
    (first,) = entries(cache_dir)
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: same bytes, new mtime
    db2, (t2,) = load([trace])
    assert len(entries(cache_dir)) == 2 and first in entries(cache_dir)
    assert dump(db1, t1) == dump(db2, t2)
    assert db2.rows("SELECT count(*) AS n FROM kernels")[0]["n"] == 70
    # a cached trace among others: ids follow the database's order
    db3, ids = load([trace, h200 / NSYS])
    assert ids == [0, 1]
    assert dump(db3, 0) == dump(db2, t2)
    rows = {k: v for k, v in dump(db3, 1).items() if k != "traces"}
    assert rows == {k: v for k, v in dump(db2, t2).items() if k != "traces"}


def test_no_cache_and_small_files(cache_dir: Path, h200: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = copy(h200 / SWEEP, tmp_path / "in")
    load([trace], cache=False)
    assert entries(cache_dir) == []
    monkeypatch.setenv("TRACEINSIGHT_CACHE", "0")
    load([trace])
    assert entries(cache_dir) == []
    monkeypatch.delenv("TRACEINSIGHT_CACHE")
    monkeypatch.setenv("TRACEINSIGHT_CACHE_MIN_BYTES", str(trace.stat().st_size + 1))
    load([trace])
    assert entries(cache_dir) == []  # below the size worth caching
    monkeypatch.setenv("TRACEINSIGHT_CACHE_MIN_BYTES", "0")
    load([trace], cache=True)
    assert len(entries(cache_dir)) == 1


def test_a_damaged_entry_is_replaced(cache_dir: Path, h200: Path, tmp_path: Path) -> None:
    trace = copy(h200 / NSYS, tmp_path / "in")
    db1, (t1,) = load([trace])
    (entry,) = entries(cache_dir)
    entry.write_bytes(b"not a database")
    db2, (t2,) = load([trace])
    assert dump(db1, t1) == dump(db2, t2)
    (again,) = entries(cache_dir)
    assert again == entry and again.stat().st_size > 1000


def test_key_changes_with_the_reader_and_the_file(cache_dir: Path, h200: Path, tmp_path: Path) -> None:
    a = copy(h200 / NSYS, tmp_path / "a")
    b = copy(h200 / NSYS, tmp_path / "b")
    assert cache.key(a) != cache.key(b)  # same bytes, another path
    assert cache.entry_path(a).parent == cache_dir / "db"
    assert len(cache.code_version()) == 16


def test_prune_keeps_the_most_recently_used(cache_dir: Path, h200: Path, tmp_path: Path) -> None:
    a = copy(h200 / NSYS, tmp_path / "a")
    b = copy(h200 / SWEEP, tmp_path / "b")
    load([a])
    load([b])
    ea, eb = cache.entry_path(a), cache.entry_path(b)
    st = ea.stat()
    os.utime(ea, ns=(st.st_atime_ns, st.st_mtime_ns - 10**10))  # a used longest ago
    removed = cache.prune(limit=eb.stat().st_size)
    assert removed == [ea] and entries(cache_dir) == [eb]


def test_code_version_scopes() -> None:
    """The ingest cache's code version hashes the ingest package's contents only: a file touched elsewhere in the
    package (same bytes, new modification time) leaves it as it is, while the analysis cache's ("package", by
    stat) changes."""
    outside = Path(cache.__file__).resolve().parents[1] / "diagnose" / "remedies.toml"
    st = outside.stat()
    before = (cache.code_version("ingest"), cache.code_version("package"))
    assert cache.code_version() == before[0] and len(before[1]) == 16
    try:
        os.utime(outside, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        cache.code_version.cache_clear()
        assert cache.code_version("ingest") == before[0]
        assert cache.code_version("package") != before[1]
    finally:
        os.utime(outside, ns=(st.st_atime_ns, st.st_mtime_ns))
        cache.code_version.cache_clear()
    assert (cache.code_version("ingest"), cache.code_version("package")) == before
    with pytest.raises(ValueError, match="code scope"):
        cache.code_version("everything")  # type: ignore[arg-type]


def entry_rows(entry: Path) -> dict[str, list[tuple]]:
    """Every row of every table of a cache entry (those stored, and the view `kernels`), in the entry's row order."""
    import duckdb

    from traceinsight.ingest.schema import stored_table_names

    with duckdb.connect(str(entry), read_only=True) as con:
        rows = {t: con.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in stored_table_names()}
        rows["kernels"] = con.execute("SELECT * FROM kernels").fetchall()  # the view, as the entry's readers see it
        return rows


def test_a_cold_analysis_writes_the_entry_the_next_reads(cache_dir: Path, h200: Path, tmp_path: Path) -> None:
    """`analyze` writes the ingest cache's entry on a worker thread beside the analysis: joined before it returns
    (no thread left), the entry the one `load` writes on its own thread, and read back by the next analysis."""
    import threading

    from traceinsight.pipeline import analyze

    trace = copy(h200 / NSYS, tmp_path / "in")
    before = threading.enumerate()
    db1, (a1,) = analyze([trace])
    assert threading.enumerate() == before
    (entry,) = entries(cache_dir)
    written = entry_rows(entry)
    assert len(written["kernels"]) == 70 and written["traces"][0][0] == 0
    entry.unlink()
    load([trace])  # the copy made in the caller's thread, as before the worker
    assert entry_rows(entry) == written
    st = entry.stat()
    os.utime(entry, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))
    db2, (a2,) = analyze([trace])
    assert entries(cache_dir) == [entry] and entry.stat().st_ino == st.st_ino  # read, not written again
    assert entry.stat().st_mtime_ns > st.st_mtime_ns - 10**9  # ... and marked used
    assert dump(db1, a1.trace_id) == dump(db2, a2.trace_id)
    assert [f.to_json() for f in a1.findings] == [f.to_json() for f in a2.findings]


def test_a_sidecar_stays_out_of_the_entry(cache_dir: Path, h200: Path, tmp_path: Path) -> None:
    """A trace analyzed with its sidecar: the entry is the trace alone (the sidecar's batches attach after it is
    taken), as the same trace read with the cache off."""
    from traceinsight.pipeline import analyze

    trace = copy(h200 / SWEEP, tmp_path / "in")
    db, (a,) = analyze([trace], meta=[h200 / "flashinfer_decode_sweep.meta.json.gz"])
    assert db.rows("SELECT count(*) AS n FROM batches")[0]["n"] > 0
    (entry,) = entries(cache_dir)
    assert entry_rows(entry)["batches"] == []
    cached, (t1,) = load([trace])
    fresh, (t2,) = load([trace], cache=False)
    assert dump(cached, t1) == dump(fresh, t2)


@pytest.mark.parametrize("blocked", ["root", "entry"])
def test_a_cache_that_cannot_be_written_leaves_the_analysis_as_it_is(
        cache_dir: Path, h200: Path, tmp_path: Path, blocked: str) -> None:
    """The worker's copy fails (the cache folder is a file; the entry's name is taken by a folder, so the finished
    copy cannot be moved into place): the analysis is the one without the cache, nothing half written is left,
    and no thread."""
    import threading

    from traceinsight.pipeline import analyze

    trace = copy(h200 / NSYS, tmp_path / "in")
    if blocked == "root":
        cache_dir.write_text("not a folder")
    else:
        cache.entry_path(trace).mkdir(parents=True)
    before = threading.enumerate()
    db, (a,) = analyze([trace])
    assert threading.enumerate() == before
    plain_db, (plain,) = analyze([trace], cache=False)
    assert [f.to_json() for f in a.findings] == [f.to_json() for f in plain.findings]
    assert len(a.steps) == len(plain.steps) > 0
    if blocked == "entry":
        assert [p.name for p in entries(cache_dir)] == [cache.entry_path(trace).name]  # the folder alone
        assert cache.entry_path(trace).is_dir()


def test_an_analysis_that_fails_stops_the_copy(cache_dir: Path, h200: Path, tmp_path: Path) -> None:
    """The analysis raises (a step pattern that is no regular expression) while the worker copies: the copy is
    interrupted and joined before the error goes on; nothing half written is left, and no thread."""
    import re
    import threading

    from traceinsight.pipeline import analyze

    trace = copy(h200 / NSYS, tmp_path / "in")
    before = threading.enumerate()
    with pytest.raises(re.error):
        analyze([trace], step_pattern="(")
    assert threading.enumerate() == before
    assert not [p for p in entries(cache_dir) if p.name.endswith((".tmp", ".wal"))]
