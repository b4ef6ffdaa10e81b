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


def _limit_bytes(db: TraceDB) -> int:
    from traceinsight.ingest.store import parse_size

    got = parse_size(str(db.con.execute("SELECT current_setting('memory_limit')").fetchone()[0]))  # type: ignore[index]
    assert got is not None
    return got


def test_the_default_limit_leaves_room_for_what_the_analysis_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --memory-limit, DuckDB's share is its default budget (80 % of the machine's or container's memory)
    less what the rest of the process holds: 1 GiB more held by Python lowers it by about that much. (DuckDB shows
    its limit rounded to 0.1 GiB: the bounds allow for it.)"""
    import numpy as np

    from traceinsight.ingest.store import MIN_FITTED_LIMIT_BYTES, resident_bytes

    monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
    with TraceDB() as db:
        assert db.budget_bytes is not None and db.budget_bytes > MIN_FITTED_LIMIT_BYTES
        assert _limit_bytes(db) == pytest.approx(db.budget_bytes, rel=0.01)  # DuckDB's own until the first fit
        db.fit_memory()
        before = _limit_bytes(db)
        rss = resident_bytes()
        rounding = 2**30 // 20
        assert rss is not None and db.budget_bytes - rss - 64 * 2**20 - rounding <= before <= db.budget_bytes
        held = np.ones(2**30, dtype=np.uint8)  # pages touched: resident
        db.fit_memory()
        after = _limit_bytes(db)
        assert 0.75 * 2**30 < before - after < 1.25 * 2**30
        del held
        db.fit_memory()
        assert _limit_bytes(db) > after + 0.75 * 2**30  # given back, DuckDB's share grows again


def test_a_limit_the_user_set_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "700MB")
    with TraceDB() as db:
        assert db.budget_bytes is None
        db.fit_memory()
        assert _limit_bytes(db) == pytest.approx(700e6, rel=0.01)


def test_pool_workers_share_the_default_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fleet pool's worker (`fleet.runners._init_worker`, no limit from the user) gets its share of DuckDB's
    default budget, fitted to what it holds as a lone analysis's is; a limit the user set stays one per worker."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    from traceinsight.fleet import runners
    from traceinsight.ingest.store import MEMORY_SHARE_ENV, MIN_FITTED_LIMIT_BYTES, resident_bytes

    monkeypatch.setenv(MEMORY_LIMIT_ENV, "")  # both restored as they were, whatever _init_worker sets below
    monkeypatch.delenv(MEMORY_LIMIT_ENV)
    monkeypatch.setenv(MEMORY_SHARE_ENV, "1")
    with TraceDB() as db:
        whole = db.budget_bytes
    assert whole is not None
    monkeypatch.delenv(MEMORY_SHARE_ENV)
    runners._init_worker(None, 4)
    assert os.environ[MEMORY_SHARE_ENV] == "4" and MEMORY_LIMIT_ENV not in os.environ
    with TraceDB() as db:
        assert db.budget_bytes == max(MIN_FITTED_LIMIT_BYTES, whole // 4)
        assert _limit_bytes(db) == pytest.approx(db.budget_bytes, rel=0.03)  # in force before the first fit
        db.fit_memory()
        rss = resident_bytes()
        assert rss is not None and db.budget_bytes - rss - 2**30 // 10 <= _limit_bytes(db) < db.budget_bytes
    monkeypatch.setenv(MEMORY_SHARE_ENV, "many")  # not a number: no share
    with TraceDB() as db:
        assert db.budget_bytes == whole
    runners._init_worker("700MB", 4)  # the user's limit: as it is in every worker
    with TraceDB() as db:
        assert db.budget_bytes is None and _limit_bytes(db) == pytest.approx(700e6, rel=0.01)
    monkeypatch.delenv(MEMORY_LIMIT_ENV)
    ctx = multiprocessing.get_context("forkserver")  # as runners._pool starts its workers
    with ProcessPoolExecutor(2, mp_context=ctx, initializer=runners._init_worker, initargs=(None, 2)) as pool:
        assert pool.submit(os.getenv, MEMORY_SHARE_ENV).result() == "2"
