"""Memory: `--memory-limit` / $TRACEINSIGHT_MEMORY_LIMIT caps DuckDB, spill files go to the cache folder (never the
working directory), a bad size and running out of memory are one line and exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceinsight.cli.main import main
from traceinsight.ingest.cache import cache_root
from traceinsight.ingest.store import MEMORY_LIMIT_ENV, TraceDB


def test_limit_and_spill_folder(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "512MB")
    with TraceDB() as db:
        ((limit, temp),) = db.con.execute(
            "SELECT current_setting('memory_limit'), current_setting('temp_directory')").fetchall()
    assert limit.replace(" ", "") in ("488.2MiB", "512.0MB", "488.2MB")
    assert Path(temp) == cache_root() / "spill" and not Path(temp).is_relative_to(Path.cwd())


def test_bad_size_is_one_line(h200: Path) -> None:
    small = h200 / "flashinfer_decode_small.pt.trace.json.gz"
    r = CliRunner().invoke(main, ["analyze", "--memory-limit", "lots", str(small)])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "expected a size such as 8GB" in r.stderr
    os.environ.pop(MEMORY_LIMIT_ENV, None)


def test_out_of_memory_is_one_line_with_what_the_input_needs(h200: Path) -> None:
    r = CliRunner().invoke(main, ["analyze", "--memory-limit", "1MB", "--no-cache",
                                  str(h200 / "flashinfer_decode_sweep.pt.trace.json.gz")])
    os.environ.pop(MEMORY_LIMIT_ENV, None)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("traceinsight: error: out of memory (limit: 1MB)")
    assert "this input needs about" in r.stderr and "--memory-limit" in r.stderr


def test_a_spill_into_a_cache_folder_that_does_not_exist_yet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB creates its spill folder but not the folders above it: a fresh $TRACEINSIGHT_CACHE_DIR (as a first run,
    or a run with the cache off, has) made a query that spilled fail with 'Failed to create directory'. It spills
    under the system's temporary folder then, and writes nothing into the cache folder."""
    from traceinsight.ingest.store import TraceDB, spill_dir

    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(tmp_path / "new" / "cache"))
    db = TraceDB()
    try:
        db.con.execute("SET memory_limit = '64MB'; SET threads = 1; SET preserve_insertion_order = false")
        n = db.con.execute("SELECT count(*) FROM (SELECT i, md5(i::VARCHAR) AS h FROM range(3000000) t(i) "
                           "ORDER BY h)").fetchall()[0][0]
        assert n == 3_000_000
        assert not (tmp_path / "new").exists()  # the cache folder is not made for a spill
        assert spill_dir().parent.is_dir()
    finally:
        db.close()
