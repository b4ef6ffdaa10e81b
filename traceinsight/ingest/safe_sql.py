"""Users' ad-hoc SQL (`traceinsight sql TRACE "select ..."`), run where it can neither write nor reach outside.

Three fences, each enough on its own for writes:
1. the statements are classified before anything runs: only SELECT (with WITH, DESCRIBE, SHOW, SUMMARIZE,
   FROM-first), EXPLAIN and PRAGMA are accepted; CREATE, INSERT, COPY, ATTACH, INSTALL/LOAD, SET, EXPORT ... are
   refused with a one-line QueryError;
2. the query runs on its own connection to a snapshot of the database copied into a private temporary folder
   (mode 0700) and opened `read_only`: the user's trace files, the analysis database and any cache database are
   never open to it;
3. that connection has `enable_external_access = false` (no file reads or writes, no ATTACH, no extension
   download), extension autoloading off, and `lock_configuration = true` (no SET can undo any of it).

A query still running after `timeout_s` is interrupted. The snapshot is deleted when the query returns.
Cost: one copy of the database per call (DuckDB's COPY FROM DATABASE, or a file copy of a database file such as a
kept analysis's), a small fraction of the ingest time.

`tables_read` tells which tables a query reads (from DuckDB's parse tree), when that can be told: `traceinsight sql`
answers a query that reads only the analysis tables from a kept analysis (cli/analysis_cache.py).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from traceinsight.errors import QueryError

if TYPE_CHECKING:
    from traceinsight.ingest.store import TraceDB

# Statement types a user query may hold (DESCRIBE, SHOW and SUMMARIZE parse as SELECT).
ALLOWED_STATEMENTS = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN, duckdb.StatementType.PRAGMA})
# Settings of the query connection; lock_configuration keeps the query from changing any of them.
READONLY_CONFIG: dict[str, Any] = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "lock_configuration": True,
}
DEFAULT_TIMEOUT_S = 300.0
# How a QueryError for a table (or another catalog entry) the database does not hold starts.
CATALOG_ERROR = "SQL error: Catalog Error"


def check_statements(query: str) -> None:
    """Raise QueryError unless `query` parses and holds only read statements (ALLOWED_STATEMENTS)."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryError(f"SQL error: {_first_line(exc)}") from None
    if not statements:
        raise QueryError("SQL error: the query is empty")
    for st in statements:
        if st.type not in ALLOWED_STATEMENTS:
            kind = str(st.type).rsplit(".", 1)[-1]
            raise QueryError(
                f"SQL error: {kind} statements are not allowed; `traceinsight sql` runs read-only queries "
                "(SELECT, WITH, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN, PRAGMA)"
            )


def snapshot(db: TraceDB, dest: Path) -> None:
    """Copy every table of `db` into a new DuckDB file `dest`."""
    source = db.con.execute("SELECT current_database()").fetchone()
    alias = "_traceinsight_snapshot"
    db.con.execute(f"ATTACH '{_sql_string(str(dest))}' AS {alias}")
    try:
        db.con.execute(f'COPY FROM DATABASE "{_ident(source[0] if source else "memory")}" TO {alias}')
    finally:
        db.con.execute(f"DETACH {alias}")


def readonly_query(
    db: TraceDB | Path, query: str, timeout_s: float | None = DEFAULT_TIMEOUT_S
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run a user's SQL on a read-only, sandboxed snapshot of `db` (a TraceDB, or a DuckDB database file, copied
    as it is); return column names and rows.

    Errors (refused statements, SQL errors, a timeout) become one-line QueryErrors starting with 'SQL error:'."""
    check_statements(query)
    folder = Path(tempfile.mkdtemp(prefix="traceinsight-sql-"))  # mode 0700: private to this user
    try:
        path = folder / "snapshot.duckdb"
        try:
            if isinstance(db, Path):
                shutil.copyfile(db, path)
            else:
                snapshot(db, path)
            con = duckdb.connect(str(path), read_only=True, config=dict(READONLY_CONFIG))
        except (duckdb.Error, OSError) as exc:
            raise QueryError(f"SQL error: cannot prepare the read-only snapshot ({_first_line(exc)})") from None
        timer = threading.Timer(timeout_s, con.interrupt) if timeout_s else None
        try:
            if timer is not None:
                timer.daemon = True
                timer.start()
            cur = con.execute(query)
            names = [d[0] for d in cur.description or []]
            rows = cur.fetchall()
            return names, rows
        except duckdb.InterruptException:
            raise QueryError(f"SQL error: the query did not finish within {timeout_s:g} s and was stopped") from None
        except duckdb.Error as exc:
            raise QueryError(f"SQL error: {_first_line(exc)}") from None
        finally:
            if timer is not None:
                timer.cancel()
            con.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# Nodes of DuckDB's parse tree (json_serialize_sql) that read no table: query nodes (*_NODE), result modifiers
# (*_MODIFIER), orders, and the table references that only combine others or read literals.
_NO_TABLE = frozenset({"ORDER_DEFAULT", "ASCENDING", "DESCENDING", "JOIN", "SUBQUERY", "EMPTY", "EXPRESSION_LIST",
                       "PIVOT"})


def tables_read(query: str) -> frozenset[str] | None:
    """The tables `query` reads (lower case; names of its own CTEs left out), or None when that cannot be told
    for sure: a statement other than SELECT (EXPLAIN, PRAGMA), DESCRIBE / SHOW / SUMMARIZE, a table function
    (`duckdb_tables()`, `unnest`, ...), a table named with its schema or catalog other than `main`, or any node
    of the parse tree not known to read no table."""
    try:
        with duckdb.connect() as con:
            row = con.execute("SELECT json_serialize_sql(?)", [query]).fetchone()
        tree = json.loads(row[0]) if row else None
    except (duckdb.Error, ValueError):
        return None
    if not isinstance(tree, dict) or tree.get("error") is not False:
        return None
    read: set[str] = set()
    ctes: set[str] = set()
    todo: list[Any] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        kind = node.get("type")
        if isinstance(kind, str) and "class" not in node:  # a query node, modifier, order or table reference
            if kind == "BASE_TABLE":
                if node.get("catalog_name") or node.get("schema_name") not in ("", "main", None):
                    return None
                read.add(str(node.get("table_name", "")).lower())
            elif not (kind in _NO_TABLE or kind.endswith(("_NODE", "_MODIFIER"))):
                return None
        cte_map = node.get("cte_map")
        if isinstance(cte_map, dict):
            ctes.update(str(e.get("key", "")).lower() for e in cte_map.get("map") or [] if isinstance(e, dict))
        todo.extend(node.values())
    return frozenset(read - ctes)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _sql_string(text: str) -> str:
    return text.replace("'", "''")


def _ident(text: str) -> str:
    return text.replace('"', '""')
