"""Ingest: one reader per format, all producing the normalized tables of `schema.sql` in DuckDB."""

from __future__ import annotations

from pathlib import Path

from traceinsight.errors import FormatError
from traceinsight.ingest.base import Ingest
from traceinsight.ingest.detect import detect
from traceinsight.ingest.store import TraceDB

__all__ = ["Ingest", "TraceDB", "detect", "read_file", "load"]


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
    from traceinsight.ingest import kineto, sidecar

    doc = kineto.load_json(path)
    if sidecar.is_sidecar(doc):
        return sidecar.from_document(doc, path), path
    if isinstance(doc, dict) and "traceEvents" in doc:
        return kineto.from_document(doc, path), path
    raise FormatError(f"{path}: JSON, but neither a Kineto/torch.profiler trace (no traceEvents) nor a sidecar")


def load(
    paths: list[Path],
    meta: list[Path] | None = None,
    ncu: list[Path] | None = None,
    db: TraceDB | None = None,
) -> tuple[TraceDB, list[int]]:
    """Ingest each path as its own trace; attach sidecars (`meta`) and Nsight Compute CSVs (`ncu`) to the
    first trace. Returns the database and the new trace ids, in the order of `paths`."""
    db = db or TraceDB()
    ids = []
    for p in paths:
        ingest, source = read_file(p)
        ids.append(db.add(ingest, p.resolve(), source.resolve()))
    for extra in (meta or []) + (ncu or []):
        ingest, source = read_file(extra)
        if ids:
            db.add(ingest, extra.resolve(), source.resolve(), attach_to=ids[0])
        else:
            ids.append(db.add(ingest, extra.resolve(), source.resolve()))
    if ids and ncu:
        from traceinsight.ingest import ncu_csv

        ncu_csv.match(db, ids[0])
    return db, ids


