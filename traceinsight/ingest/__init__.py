"""Ingest: one reader per format, all producing the normalized tables of `schema.sql` in DuckDB.

`load` reads trace files into one database (each file its own trace), reusing the cached database of a file
read before and unchanged since (`traceinsight.ingest.cache`). Heavy modules (DuckDB, pyarrow) are imported on
first use, so that the readers stay cheap to import (worker processes import only what they run).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceinsight.errors import FormatError
from traceinsight.ingest.detect import detect

if TYPE_CHECKING:
    import duckdb

    from traceinsight.ingest.base import Ingest
    from traceinsight.ingest.store import TraceDB

__all__ = ["Ingest", "TraceDB", "detect", "read_file", "load", "add_trace", "save"]


def __getattr__(name: str) -> Any:
    if name == "TraceDB":
        from traceinsight.ingest.store import TraceDB

        return TraceDB
    if name == "Ingest":  # its module imports pyarrow: loaded on first use (the cache's lookups need neither)
        from traceinsight.ingest.base import Ingest

        return Ingest
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def read_file(path: Path) -> tuple[Ingest, Path]:
    """Read one file of any supported format; return the reader's output and the file actually read."""
    fmt = detect(path)
    if fmt == "nsys-rep":
        from traceinsight.ingest import nsys_rep, nsys_sqlite

        exported = nsys_rep.export(path)
        ingest = nsys_sqlite.read(exported)
        ingest.format = "nsys-rep"
        return ingest, exported
    if fmt == "nsys-sqlite":
        from traceinsight.ingest import nsys_sqlite

        return nsys_sqlite.read(path), path
    if fmt == "ncu-csv":
        from traceinsight.ingest import ncu_csv

        return ncu_csv.read(path), path
    if fmt == "flashinfer-log":
        from traceinsight.ingest import flashinfer_log

        return flashinfer_log.read(path), path
    from traceinsight.ingest import kineto, sidecar

    streamed = kineto.read(path)  # a Kineto trace, streamed; None for other JSON (sidecars), parsed whole below
    if streamed is not None:
        return streamed, path
    doc = kineto.load_json(path)
    if sidecar.is_sidecar(doc):
        return sidecar.from_document(doc, path), path
    if isinstance(doc, dict) and "traceEvents" in doc:
        return kineto.from_document(doc, path), path
    raise FormatError(f"{path}: JSON, but neither a Kineto/torch.profiler trace (no traceEvents) nor a sidecar")


def add_trace(db: TraceDB, path: Path, cache: bool | None = None,
              unsaved: list[tuple[int, Path]] | None = None) -> int:
    """Ingest one trace file into `db` as a new trace and return its trace_id.

    With the cache on (`cache=None`: unless $TRACEINSIGHT_CACHE=0), a file read before and unchanged since is
    copied from its cached database instead of being read; a file read now is saved to the cache (files under
    `cache.CACHE_MIN_BYTES` excepted), or, given `unsaved`, its (trace_id, path) appended there for the caller to
    save (`save`). A cache that cannot be written is skipped silently."""
    import duckdb

    from traceinsight.ingest import cache as _cache

    resolved = path.resolve()
    use = _cache.enabled(cache) and _cache.worth_caching(path)
    if use and (hit := _cache.lookup(path)) is not None:
        try:
            return db.add_saved(hit, resolved)
        except (duckdb.Error, OSError):
            _cache.discard(hit)  # damaged or foreign entry: read the file again
    ingest, source = read_file(path)
    trace_id = db.add(ingest, resolved, source.resolve(), consume=True)
    if use:
        if unsaved is None:
            save(db, [(trace_id, path)])
        else:
            unsaved.append((trace_id, path))
    return trace_id


def save(db: TraceDB, traces: list[tuple[int, Path]], con: duckdb.DuckDBPyConnection | None = None) -> None:
    """Write each (trace_id, path) of `db` into the ingest cache as the entry of `path`, through `con` (default
    `db.con`: see `TraceDB.save_trace`); an entry that cannot be written is skipped (a half-written one
    deleted)."""
    import duckdb

    from traceinsight.ingest import cache as _cache

    for trace_id, path in traces:
        try:
            final = _cache.entry_path(path)
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = _cache.temp_path(final)
        except OSError:
            continue
        try:
            db.save_trace(trace_id, tmp, con)
            _cache.commit(tmp, final)
        except (duckdb.Error, OSError):
            _cache.discard(tmp)


def load(
    paths: list[Path],
    meta: list[Path] | None = None,
    ncu: list[Path] | None = None,
    db: TraceDB | None = None,
    cache: bool | None = None,
    background: bool = False,
) -> tuple[TraceDB, list[int]]:
    """Ingest each path as its own trace; attach sidecars (`meta`) and Nsight Compute CSVs (`ncu`) to the
    first trace. Returns the database and the new trace ids, in the order of `paths`. `cache`: see
    `add_trace` (False: always read the files, and write no cache). `background`: the cache entries of the files
    read now are written once all is loaded, on `db`'s worker thread (`TraceDB.start_worker`), while the caller
    goes on (the analysis, mostly Python, beside a copy that is DuckDB's: 3.3 CPU-s of a 1M-kernel export); the
    caller joins it (`TraceDB.join_worker` or `close`)."""
    from traceinsight.ingest.store import TraceDB

    db = db or TraceDB()
    unsaved: list[tuple[int, Path]] | None = [] if background else None
    ids = [add_trace(db, p, cache=cache, unsaved=unsaved) for p in paths]
    extras = (meta or []) + (ncu or [])
    if extras and unsaved and unsaved[0][0] == ids[0]:
        save(db, [unsaved.pop(0)])  # its entry is the trace alone: saved before the extras attach to it
    for extra in extras:
        ingest, source = read_file(extra)
        if ids:
            db.add(ingest, extra.resolve(), source.resolve(), attach_to=ids[0])
        else:
            ids.append(db.add(ingest, extra.resolve(), source.resolve()))
    if ids and ncu:
        from traceinsight.ingest import ncu_match

        ncu_match.match(db, ids[0])
    db.compress()  # first: a checkpoint waits for the transactions of the worker's copy
    if unsaved:
        pending = unsaved
        db.start_worker(lambda con: save(db, pending, con), name="ingest-cache")
    return db, ids
