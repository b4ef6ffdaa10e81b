"""The normalized DuckDB database: create it, load readers' output into it, query it."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from traceinsight.errors import QueryError
from traceinsight.ingest.base import Ingest

# Tables whose rows get a per-trace id in start order, and the name of that id column.
_ID_COLUMNS = {"kernels": "kernel_id", "ranges": "range_id"}
# Tables whose rows get dur_ns = end_ns - start_ns on insert.
_DURATION_TABLES = {"kernels", "ranges", "memops"}


def schema_sql() -> str:
    return resources.files("traceinsight.ingest").joinpath("schema.sql").read_text()


class TraceDB:
    """One DuckDB connection holding the normalized tables of one or more traces."""

    def __init__(self, path: str | os.PathLike[str] | None = None, read_only: bool = False) -> None:
        self.path = str(path) if path is not None else ":memory:"
        self.con = duckdb.connect(self.path, read_only=read_only)
        if not read_only:
            self.con.execute(schema_sql())

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> TraceDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ loading
    def next_trace_id(self) -> int:
        row = self.con.execute("SELECT coalesce(max(trace_id) + 1, 0) FROM traces").fetchone()
        return int(row[0]) if row else 0

    def add(self, ingest: Ingest, path: Path, source_path: Path | None = None, attach_to: int | None = None) -> int:
        """Insert one reader's output as a new trace and return its trace_id; or, with `attach_to`, add its
        rows (ncu metrics, a sidecar's batches) to that existing trace."""
        trace_id = self.next_trace_id() if attach_to is None else attach_to
        for table, cols in ingest.tables.items():
            self._insert(trace_id, table, cols)
        if attach_to is not None:
            return trace_id
        span = self.con.execute(
            "SELECT min(start_ns), max(end_ns) FROM (SELECT start_ns, end_ns FROM kernels WHERE trace_id = $t "
            "UNION ALL SELECT start_ns, end_ns FROM memops WHERE trace_id = $t)",
            {"t": trace_id},
        ).fetchone()
        self.con.execute(
            "INSERT INTO traces VALUES ($id, $path, $fmt, $fv, $tv, $src, $size, $s, $e, $w)",
            {
                "id": trace_id,
                "path": str(path),
                "fmt": ingest.format,
                "fv": ingest.format_version,
                "tv": ingest.tool_version,
                "src": str(source_path or path),
                "size": path.stat().st_size if path.exists() else None,
                "s": span[0] if span else None,
                "e": span[1] if span else None,
                "w": list(ingest.warnings),
            },
        )
        return trace_id

    def _insert(self, trace_id: int, table: str, cols: dict[str, list[Any]]) -> None:
        if not cols or not len(next(iter(cols.values()))):
            return
        arrow = pa.table(cols)  # noqa: F841  (scanned by name below)
        extra = [f"{trace_id} AS trace_id"]
        order = ""
        if table in _DURATION_TABLES:
            extra.append("end_ns - start_ns AS dur_ns")
        if table in _ID_COLUMNS:
            base = self.con.execute(
                f"SELECT coalesce(max({_ID_COLUMNS[table]}) + 1, 0) FROM {table} WHERE trace_id = $t", {"t": trace_id}
            ).fetchone()
            offset = int(base[0]) if base else 0
            extra.append(f"{offset} + row_number() OVER (ORDER BY start_ns, end_ns DESC) - 1 AS {_ID_COLUMNS[table]}")
            order = " ORDER BY start_ns, end_ns DESC"
        self.con.execute(f"INSERT INTO {table} BY NAME SELECT *, {', '.join(extra)} FROM arrow{order}")

    # ------------------------------------------------------------------ querying
    def sql(self, query: str, params: dict[str, Any] | list[Any] | None = None) -> duckdb.DuckDBPyRelation | None:
        return self.con.execute(query, params) if params is not None else self.con.execute(query)

    def rows(self, query: str, params: dict[str, Any] | list[Any] | None = None) -> list[dict[str, Any]]:
        """Run a query and return its rows as dicts."""
        cur = self.con.execute(query, params) if params is not None else self.con.execute(query)
        names = [d[0] for d in cur.description or []]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def user_query(self, query: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run a user's ad-hoc SQL; errors become one-line QueryErrors."""
        try:
            cur = self.con.execute(query)
            names = [d[0] for d in cur.description or []]
            return names, cur.fetchall()
        except duckdb.Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise QueryError(f"SQL error: {first}") from None
