"""SQL for one Nsight Systems export as `sqlite3` reads it: quoted names, and the value checks of damaged input.

SQLite stores any value in any column, so every value is checked: an integer out of its column's range, a REAL, TEXT
or BLOB where an integer belongs becomes NULL (`int_sql`, `text_sql`), and rows whose start/end are not integers
with end >= start are not read (`valid_span`). The Arrow route does the same in Arrow compute (`sqlite_arrow`).
"""

from __future__ import annotations

import sqlite3

import pyarrow as pa

from traceinsight.ingest import sqlite_arrow
from traceinsight.ingest.arrow_numpy import int64_array, ints, valid

# Bound parameters per statement (SQLite before 3.32 allows 999).
SQL_PARAMS = 900

# GlobalId serialization: bits 24..47 hold the process id, bits 0..23 the thread id.
PID_SQL = "(({col} >> 24) & 16777215)"

# Value ranges of the normalized columns (INTEGER is int32, BIGINT int64).
I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)

# SQLite result codes of a file that is not (or no longer) a whole database.
DAMAGE_CODES = ("SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_IOERR")


def is_damage(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused because the file is damaged (salvageable), not because of a query."""
    return str(getattr(exc, "sqlite_errorname", "")).startswith(DAMAGE_CODES)


def quote(name: str) -> str:
    """A column name as a quoted SQL identifier (`end` is a keyword)."""
    return '"' + name.replace('"', '""') + '"'


def int_sql(expr: str, bounds: tuple[int, int] = I64) -> str:
    """`expr` when it is an integer within `bounds`, else NULL (SQLite keeps text, reals and blobs in INTEGER
    columns as they were written)."""
    if expr == "NULL":
        return expr
    lo, hi = bounds
    if (lo, hi) == I64:  # every SQLite integer is an int64
        return sqlite_arrow.as_int_sql(expr)
    return f"(CASE WHEN typeof({expr}) = 'integer' AND ({expr}) BETWEEN {lo} AND {hi} THEN ({expr}) END)"


def text_sql(expr: str) -> str:
    """`expr` as TEXT when it is text (or a blob, read as text), else NULL."""
    if expr == "NULL":
        return expr
    return f"(CASE typeof({expr}) WHEN 'text' THEN {expr} WHEN 'blob' THEN CAST({expr} AS TEXT) END)"


def valid_span(start: str = '"start"', end: str = '"end"') -> str:
    """Rows whose start and end are integers with end >= start and a duration that fits int64 (an overflowing
    SQLite subtraction gives a REAL beyond the bound)."""
    return (
        f"typeof({start}) = 'integer' AND typeof({end}) = 'integer' AND {end} >= {start} "
        f"AND ({end} - {start}) <= {I64[1]}"
    )


def global_ids(ids: pa.Array) -> dict[str, pa.Array]:
    """process_id and thread_id of serialized GlobalIds (null stays null), in numpy (`pc` with a Python int imports
    pandas: see `arrow_numpy`)."""
    v, ok = ints(ids, 0), (valid(ids) if ids.null_count else None)
    return {"process_id": int64_array((v >> 24) & 16777215, ok), "thread_id": int64_array(v & 16777215, ok)}


def id_list(ids: set[int]) -> str:
    return ", ".join(str(int(i)) for i in sorted(ids)) or "NULL"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
