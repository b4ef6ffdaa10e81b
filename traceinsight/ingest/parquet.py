"""Write the normalized tables of traces as one Parquet dataset, partitioned by trace, for fleet-wide queries.

Layout (hive-style, readable by DuckDB, Spark, Trino, pyarrow):

    DIR/manifest.json                       inputs, row counts, versions (schema `traceinsight.parquet/1`)
    DIR/<table>/trace=<key>/part-0.parquet  one file per table and trace

`<table>` is every table of `schema.sql` plus `kernel_labels` when the database has it (the labels of the
kernel names that trace ran). `<key>` names the trace: the input's file name without its trace suffixes
(`rank0` for `rank0.pt.trace.json.gz`), made unique (`-<hash of the path>`) when another input of the dataset
has the same name; it is never a bare number (so engines read it as text). The per-database `trace_id` is left
out: the partition column `trace` takes its place, and `kernel_id` / `range_id` are numbered within a trace.

Exporting into an existing DIR adds or replaces the partitions of the traces exported and keeps the others;
each file is written under a temporary name and renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceinsight import __version__
from traceinsight.ingest.paths import trace_stem
from traceinsight.ingest.schema import analysis_table_names, schema_sql, table_names
from traceinsight.ingest.store import TraceDB, quote_path

MANIFEST = "manifest.json"
SCHEMA = "traceinsight.parquet/1"
PART = "part-0.parquet"
LABELS_TABLE = "kernel_labels"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass
class Exported:
    """What `export_parquet` wrote: the dataset folder, the manifest, and per trace its key and row counts."""

    out_dir: Path
    manifest: Path
    traces: list[dict[str, Any]] = field(default_factory=list)


def trace_key(path: str, taken: dict[str, str]) -> str:
    """The partition key of input `path`, given `taken` (key -> input path) of the dataset so far."""
    key = _UNSAFE.sub("_", trace_stem(Path(path).name)).strip("._") or "trace"
    if key.isdigit():
        key = f"t{key}"
    if taken.get(key, path) != path:
        key = f"{key}-{hashlib.sha256(path.encode()).hexdigest()[:8]}"
    return key


def export_parquet(db: TraceDB, trace_ids: list[int], out_dir: Path, options: dict[str, Any] | None = None) -> Exported:
    """Write traces `trace_ids` of `db` into the dataset at `out_dir` (see the module docstring)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = out_dir / MANIFEST
    old = _read_manifest(manifest_path)
    taken = {t["trace"]: t["path"] for t in old.get("traces", [])}
    tables = list(table_names()) + (list(analysis_table_names()) if (options or {}).get("analysis") else [])
    row = db.con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = $t", {"t": LABELS_TABLE}
    ).fetchone()
    has_labels = bool(row and row[0])
    if has_labels:
        tables.append(LABELS_TABLE)
    written: list[dict[str, Any]] = []
    for trace_id in trace_ids:
        meta = db.rows("SELECT * FROM traces WHERE trace_id = $t", {"t": trace_id})[0]
        key = trace_key(meta["path"], taken)
        taken[key] = meta["path"]
        rows: dict[str, int] = {}
        for table in tables:
            rows[table] = _copy(db, partition_query(db, table, trace_id), out_dir / table / f"trace={key}" / PART)
        written.append(
            {
                "trace": key,
                "path": meta["path"],
                "source_path": meta["source_path"],
                "format": meta["format"],
                "format_version": meta["format_version"],
                "tool_version": meta["tool_version"],
                "size_bytes": meta["size_bytes"],
                "mtime_ns": _mtime_ns(meta["path"]),
                "warnings": list(meta["warnings"] or []),
                "rows": rows,
                "exported": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
        )
    keys = {t["trace"] for t in written}
    traces = [t for t in old.get("traces", []) if t["trace"] not in keys] + written
    import duckdb
    import pyarrow

    manifest = {
        "schema": SCHEMA,
        "layout": "<table>/trace=<trace>/" + PART,
        "tables": tables,
        "versions": {
            "traceinsight": __version__,
            "duckdb": duckdb.__version__,
            "pyarrow": pyarrow.__version__,
            "schema_sql_sha256": hashlib.sha256(schema_sql().encode()).hexdigest(),
        },
        "options": options or {},
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "traces": sorted(traces, key=lambda t: t["trace"]),
    }
    tmp = manifest_path.with_name(f".{MANIFEST}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, manifest_path)
    return Exported(out_dir, manifest_path, written)


# Tables the store keeps in id order (`TraceDB._insert` inserts their rows numbered in start order and DuckDB
# preserves insertion order): written as scanned. Sorting them again made DuckDB hold the whole table decompressed
# (a 10M-kernel export peaked at 16.7 GB).
_STORED_IN_ID_ORDER = ("kernels", "ranges")


def partition_query(db: TraceDB, table: str, trace_id: int) -> str:
    """The query of one trace's rows of `table` as its partition holds them: without `trace_id` (the partition
    column takes its place), in a stable order; `kernel_labels` holds the labels of the names the trace ran."""
    if table == LABELS_TABLE:
        return (f"SELECT * FROM {LABELS_TABLE} WHERE name IN "
                f"(SELECT DISTINCT name FROM kernels WHERE trace_id = {int(trace_id)}) ORDER BY name")
    return f"SELECT * EXCLUDE (trace_id) FROM {table} WHERE trace_id = {int(trace_id)}{_order(db, table)}"


def _order(db: TraceDB, table: str) -> str:
    if table in _STORED_IN_ID_ORDER:
        return ""
    cols = {
        r[0]
        for r in db.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = $t", {"t": table}
        ).fetchall()
    }
    for first in ("kernel_id", "range_id", "start_ns", "ncu_id", "device_id", "finding", "step"):
        if first in cols:
            return f" ORDER BY {first}"
    return ""


def _copy(db: TraceDB, query: str, dest: Path) -> int:
    """Write the result of `query` to the Parquet file `dest` (atomically); return its row count."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.tmp")
    target = quote_path(tmp)
    try:
        n = db.con.execute(f"COPY ({query}) TO '{target}' (FORMAT parquet, COMPRESSION zstd)").fetchone()
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return int(n[0]) if n else 0


def _mtime_ns(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else {}
