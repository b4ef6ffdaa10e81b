"""A cache of analyses: `analyze` run again on unchanged inputs with the same options renders its report from the
analysis tables it kept (`traceinsight.report.saved`, as `traceinsight report` does), without reading or analyzing
the traces again: the same bytes on stdout and stderr, for text, JSON, Markdown and HTML.

An analysis is kept the second time the same inputs are analyzed: the first run leaves only an empty marker
named by its key, since writing the tables costs a one-off run (a CI gate) time for nothing. Inputs of
KEEP_AT_ONCE_BYTES or more together ($TRACEINSIGHT_ANALYSIS_KEEP_BYTES) are kept the first time: there the
analysis after the read is what a repeat would redo (the 1M-kernel export: ~21 CPU-s) and writing its tables a
fraction of it (~2.5-3 s), so the second run renders from them (0.8 s; docs/SCALE.md, issue 28).

An entry is a DuckDB file holding the analysis tables (`report/tables.py`) of one `analyze` call, under
`<cache folder>/analysis/` (the cache folder of `traceinsight.ingest.cache`). It is named by a key of:
- every input in its role, in order: each trace as found (real path, size, modification time, inode: `cache.key`),
  whatever path spells it (`t.json`, `./t.json`, a link to it: the analysis keeps and shows the real path only, so
  the reports are the same bytes); each sidecar and Nsight Compute CSV as given and as found (the analysis's
  warnings quote them as given: "the sidecar ./s.json matches none of the steps");
- the options that change the analysis (`--step-pattern`);
- the environment variables that may change it ($TRACEINSIGHT_*, except those that only tune the cache, memory
  and threads), and the user's kernel rules file ($TRACEINSIGHT_RULES) as found;
- the code: traceinsight's version and every source, query and data file of the package (path, size, modification
  time: `ingest_cache.code_version("package")`), and DuckDB's version.
Any of them changed misses. Only inputs worth the ingest cache (`cache.worth_caching`, together) are kept, and the
cache obeys `--no-cache` / $TRACEINSIGHT_CACHE like the ingest cache; $TRACEINSIGHT_ANALYSIS_CACHE=0 turns off this
cache alone (benchmarks that time the analysis with the ingest cache filled). Entries are written to a temporary
file and renamed into place; a damaged one is deleted and the traces analyzed again; least-recently-used entries go
beyond $TRACEINSIGHT_CACHE_MAX_BYTES (with the ingest cache's own, each folder on its own).

`traceinsight sql PATHS QUERY` shares the entries of `analyze PATHS` (same key, default options; a sidecar or an
Nsight Compute CSV among PATHS is its own trace in both, as `load` reads every path, not attached to the first
trace as `analyze TRACE --meta SIDECAR` attaches it: that is another analysis, with its own entry): a query that
reads only the analysis tables (`safe_sql.tables_read`) is answered from a kept entry, which holds no trace table
(kernels, launches, ...); any other query, or one the parse tree cannot vouch for, runs on the analyzed traces as
before, and that analysis is kept as `analyze`'s is (a marker first). The dashboard reads a kept entry too
(dashboards/app.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceinsight.ingest import cache as ingest_cache  # stdlib and DuckDB's version only (no pyarrow)

if TYPE_CHECKING:
    from traceinsight.ingest.store import TraceDB
    from traceinsight.report.saved import Saved

# $TRACEINSIGHT_* variables that cannot change an analysis's result (the cache's own, memory, threads, and those
# `traceinsight dashboard` passes its app: the dashboard looks its traces up with them set).
ENV_NOT_IN_KEY = frozenset({
    "TRACEINSIGHT_CACHE", "TRACEINSIGHT_CACHE_DIR", "TRACEINSIGHT_CACHE_MIN_BYTES", "TRACEINSIGHT_CACHE_MAX_BYTES",
    "TRACEINSIGHT_MEMORY_LIMIT", "TRACEINSIGHT_MEMORY_SHARE", "TRACEINSIGHT_WORKERS", "TRACEINSIGHT_ANALYSIS_CACHE",
    "TRACEINSIGHT_DASHBOARD_PATHS", "TRACEINSIGHT_DASHBOARD_META", "TRACEINSIGHT_DASHBOARD_FLEET",
    "TRACEINSIGHT_MAX_UPLOAD_MB", "TRACEINSIGHT_ANALYSIS_KEEP_BYTES",
})
OFF_ENV = "TRACEINSIGHT_ANALYSIS_CACHE"
KEEP_ENV = "TRACEINSIGHT_ANALYSIS_KEEP_BYTES"
# Inputs this large (bytes on disk, together) are kept at their first analysis, not at the second.
KEEP_AT_ONCE_BYTES = 256 << 20
RULES_ENV = "TRACEINSIGHT_RULES"
# The marker of inputs analyzed once, beside where their entry would be.
SEEN_SUFFIX = ".seen"
# How safe_sql.readonly_query says the database could not be copied or opened.
SNAPSHOT_ERROR = "SQL error: cannot prepare the read-only snapshot"

def folder() -> Path:
    return ingest_cache.cache_root() / "analysis"


def _found(path: Path) -> str:
    """An input as given and as found (`cache.key`: real path, size, modification time, inode)."""
    return f"{path}|{ingest_cache.key(path)}"


def entry_path(traces: list[Path], meta: list[Path], ncu: list[Path], step_pattern: str | None,
               enabled: bool | None) -> Path | None:
    """Where the analysis of these inputs with these options is (or would be) kept; None when it is not cached
    (the cache is off, an input is not a file, or the traces are too small to be worth it)."""
    if not ingest_cache.enabled(enabled) or not traces:
        return None
    if ingest_cache.switched_off(OFF_ENV):
        return None
    try:
        if sum(os.stat(t).st_size for t in traces) < ingest_cache.min_bytes():
            return None
        parts = [ingest_cache.code_version("package"), f"step_pattern={step_pattern!r}"]
        parts += [f"trace:{ingest_cache.key(p)}" for p in traces]
        parts += [f"{kind}:{_found(p)}" for kind, paths in (("meta", meta), ("ncu", ncu)) for p in paths]
        env = sorted((k, v) for k, v in os.environ.items() if k.startswith("TRACEINSIGHT_") and k not in ENV_NOT_IN_KEY)
        parts += [f"env:{k}={v}" for k, v in env]
        rules = os.environ.get(RULES_ENV, "").strip()
        if rules:
            parts.append(f"rules:{_found(Path(rules).expanduser())}")
    except (OSError, ValueError):
        return None  # an input is missing or not a file: the analysis says so
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]
    return folder() / f"{key}{ingest_cache.SUFFIX}"


def lookup(entry: Path) -> Saved | None:
    """The kept analysis at `entry`, loaded (and marked used); None when there is none or it is damaged (then
    it is deleted)."""
    from traceinsight.report.saved import open_saved

    if not entry.is_file():
        return None
    try:
        saved = open_saved(entry)
        os.utime(entry)  # least-recently-used order for pruning
        return saved
    except Exception:  # a damaged or unreadable entry (any error of DuckDB's or the reader's): analyze again
        ingest_cache.discard(entry)
        with contextlib.suppress(OSError):
            entry.with_suffix(SEEN_SUFFIX).touch()  # these inputs were analyzed before: keep the new analysis
        return None


def answer(entry: Path, query: str) -> tuple[list[str], list[tuple[Any, ...]]] | None:
    """`traceinsight sql`'s answer to `query` from the kept analysis at `entry` (its file copied into the sandbox
    of `safe_sql.readonly_query`); None when there is none, when the query may read a table it does not hold (it
    holds the analysis tables only: then the traces are analyzed), or when it cannot be read (then it is deleted).
    The user's own SQL errors are raised as the analyzed traces would raise them."""
    from traceinsight.errors import QueryError
    from traceinsight.ingest.safe_sql import CATALOG_ERROR, readonly_query, tables_read
    from traceinsight.ingest.schema import analysis_table_names

    read = tables_read(query)
    if read is None or not read <= set(analysis_table_names()) or not entry.is_file():
        return None
    try:
        result = readonly_query(entry, query)
    except QueryError as exc:
        if str(exc).startswith(CATALOG_ERROR):  # a name the parse tree hid (a CTE's scope): the traces answer
            return None
        if str(exc).startswith(SNAPSHOT_ERROR):  # damaged or gone: analyze again, and keep that analysis
            ingest_cache.discard(entry)
            with contextlib.suppress(OSError):
                entry.with_suffix(SEEN_SUFFIX).touch()
            return None
        raise
    with contextlib.suppress(OSError):
        os.utime(entry)  # least-recently-used order for pruning
    return result


def keep_at_once(traces: list[Path]) -> bool:
    """Whether these traces are large enough (KEEP_AT_ONCE_BYTES) to keep their analysis the first time."""
    try:
        limit = int(os.environ.get(KEEP_ENV, KEEP_AT_ONCE_BYTES))
        return sum(os.stat(t).st_size for t in traces) >= limit
    except (OSError, ValueError):
        return False


def keeps(entry: Path, traces: list[Path]) -> bool:
    """Whether `store` keeps the analysis at `entry` (not a marker only): these inputs were analyzed before, or
    they are large (`keep_at_once`)."""
    return entry.with_suffix(SEEN_SUFFIX).exists() or (bool(traces) and keep_at_once(traces))


@contextlib.contextmanager
def keeping(db: TraceDB, analyses: list[Any], entry: Path) -> Iterator[Saved | None]:
    """Keep these analyses at `entry` as `store` does, their tables written once: straight into the new entry's
    temporary file (attached to `db`), and the block given the documents read from there (`report.saved`), not
    from tables written in memory and then copied (that copy was ~1 s of the 1M-kernel export's cold run). The
    entry is committed when the block ends; an error of the block discards it (no half-written entry) and is
    raised. When the file cannot be written (a full disk, a read-only cache folder: best effort, as `store`), the
    block is given None and nothing is kept: the caller writes the tables in memory as without the cache."""
    from traceinsight.report.saved import of_analyses

    cursor = _write_new(db, analyses, entry)
    if cursor is None:
        yield None
        return
    tmp, con = cursor
    try:
        yield of_analyses(con, analyses)
    except BaseException:
        _detach(db, tmp, con)
        raise
    _commit(db, tmp, con, entry)


# The name of an entry's temporary file attached to the analysis's database while its tables are written.
ATTACHED = "analysis_cache"


def _attach_new(db: TraceDB, entry: Path) -> Path | None:
    """A new temporary file for `entry`, holding the analysis tables (typed, empty), attached to `db` as ATTACHED;
    None when it cannot be made (nothing left behind)."""
    import duckdb

    from traceinsight.ingest.schema import analysis_schema_sql
    from traceinsight.ingest.store import quote_path

    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = ingest_cache.temp_path(entry)
        with duckdb.connect(str(tmp)) as con:  # the analysis tables, typed (as TraceDB.save_trace makes its file)
            con.execute(analysis_schema_sql())
        db.con.execute(f"ATTACH '{quote_path(tmp)}' AS {ATTACHED}")
        return tmp
    except (OSError, duckdb.Error):
        if tmp is not None:
            ingest_cache.discard(tmp)
        return None


def _write_new(db: TraceDB, analyses: list[Any], entry: Path) -> tuple[Path, Any] | None:
    """These analyses' tables written into a new temporary file for `entry` (`_attach_new`), and a cursor of `db`
    that reads them (USE); None when the file cannot be made or written (nothing left behind)."""
    import duckdb

    from traceinsight.report.tables import write_tables

    tmp = _attach_new(db, entry)
    if tmp is None:
        return None
    cursor = None
    try:
        write_tables(db, analyses, into=ATTACHED)
        cursor = db.con.cursor()
        cursor.execute(f"USE {ATTACHED}")  # the report's queries read the entry's tables
    except (OSError, duckdb.Error):
        _detach(db, tmp, cursor)
        return None
    return tmp, cursor


def _detach(db: TraceDB, tmp: Path, cursor: Any = None) -> None:
    """Let go of the temporary file `tmp` (ATTACHED) and delete it."""
    import duckdb

    if cursor is not None:
        cursor.close()  # its USE of the file
    with contextlib.suppress(duckdb.Error):
        db.con.execute(f"DETACH {ATTACHED}")
    ingest_cache.discard(tmp)


def _commit(db: TraceDB, tmp: Path, cursor: Any, entry: Path) -> None:
    """Detach the finished temporary file `tmp` and move it into place as `entry` (best effort: nothing kept when
    that fails)."""
    import duckdb

    if cursor is not None:
        cursor.close()
    try:
        db.con.execute(f"DETACH {ATTACHED}")
        ingest_cache.commit(tmp, entry)
        entry.with_suffix(SEEN_SUFFIX).unlink(missing_ok=True)
    except (OSError, duckdb.Error):
        ingest_cache.discard(tmp)


def store(db: TraceDB, analyses: list[Any], entry: Path, traces: list[Path] | None = None,
          written: bool = False) -> None:
    """Keep these analyses' tables at `entry` when they were analyzed before (a marker beside it says so; else
    leave the marker), or at once when `traces` are large (`keep_at_once`); `written`: the tables are in `db`
    already (the report was read from them), copied as they are. Best effort: a full disk or a read-only cache
    folder keeps nothing and says nothing."""
    import duckdb

    seen = entry.with_suffix(SEEN_SUFFIX)
    if not keeps(entry, traces or []):
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            seen.touch()
        except OSError:
            pass
        return

    from traceinsight.report.tables import copy_tables, write_tables

    tmp = _attach_new(db, entry)
    if tmp is None:
        return
    try:
        if written:
            copy_tables(db.con, [a.trace_id for a in analyses], ATTACHED)
        else:  # straight into the file, a table at a time (no copy in memory: 0.35 GB less at 1M kernels)
            write_tables(db, analyses, into=ATTACHED)
    except (OSError, duckdb.Error):
        _detach(db, tmp)
        return
    _commit(db, tmp, None, entry)


def warnings(saved: Saved) -> list[tuple[str, str]]:
    """(trace path, warning) of every kept analysis, in trace order: what `analyze` writes on stderr."""
    rows = saved.con.execute("SELECT path, warnings FROM analyses ORDER BY trace_id").fetchall()
    return [(path, w) for path, ws in rows for w in (ws or [])]

