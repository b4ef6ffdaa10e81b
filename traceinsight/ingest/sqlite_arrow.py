"""SQLite query results as Arrow columns, and the value checks of a damaged export done on Arrow arrays.

`int_columns` runs one query through the ADBC SQLite driver (Apache Arrow's C driver: rows go from SQLite's
pages into Arrow buffers with no Python object per value, several times faster than `sqlite3`'s cursor). The
driver types each column from its first rows and stops at a later value of another type (SQLite keeps text, reals
and blobs in INTEGER columns as written), so a query that meets one is run again with every expression wrapped to
"this value when it is an integer, else NULL". Where the driver cannot read the file at all (a truncated or
damaged export), `Unreadable` sends the caller to its `sqlite3` route, which reports damage as SQLite does.

The checks mirror the SQL ones of `nsys_sql` (`int_sql`, `valid_span`) at Arrow speed: `within` nulls
integers outside a column's range, `span_ok` says which rows have a usable start/end.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceinsight.ingest.arrow_numpy import int64_array, ints, numbers, string_array, valid

I64_MAX = 2**63 - 1


class Unreadable(Exception):
    """The ADBC driver could not run the query on this file; read it through `sqlite3` instead."""


def uri(path: Path) -> str:
    """A read-only, immutable `file:` URI for `path` (no journal, WAL or lock file is ever written beside it);
    percent-quoted so that '#', '?' or '%' in the path cannot end or alter the URI."""
    return f"file:{quote(str(Path(path).absolute()))}?mode=ro&immutable=1"


def as_int_sql(expr: str) -> str:
    """`expr` when it is an integer, else NULL (SQL; the literal NULL stays as it is)."""
    if expr == "NULL":
        return expr
    return f"(CASE typeof({expr}) WHEN 'integer' THEN {expr} END)"


def int_columns(path: Path, exprs: list[str], names: list[str], source: str) -> dict[str, pa.Array]:
    """`SELECT exprs source` (source: "FROM ... WHERE ... ORDER BY ...") as one int64 array per name; values
    that are not integers read as null. Raises Unreadable where the driver cannot run it."""
    try:
        table = _query(path, f"SELECT {', '.join(exprs)} {source}")
        if not all(_integral(t) for t in table.schema.types):  # a column typed REAL or TEXT from its first rows
            raise Unreadable("not integers")
    except Unreadable:
        table = _query(path, f"SELECT {', '.join(map(as_int_sql, exprs))} {source}")
    out: dict[str, pa.Array] = {}
    for name, column in zip(names, table.columns, strict=True):
        values = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        out[name] = values if values.type == pa.int64() else values.cast(pa.int64())
    return out


def text_column(path: Path, expr: str, source: str) -> pa.Array:
    """`SELECT expr source` (an expression giving TEXT or NULL) as one string array. Raises Unreadable where the
    driver cannot run it, types the column otherwise, or reads text that is not UTF-8 (`sqlite3` reads it with
    U+FFFD for the bad bytes)."""
    table = _query(path, f"SELECT {expr} {source}")
    column = table.column(0)
    values = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if pa.types.is_null(values.type):
        return values.cast(pa.string())
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        raise Unreadable(f"not text: {values.type}")
    try:
        values.validate(full=True)  # UTF-8 too
    except pa.ArrowInvalid as exc:
        raise Unreadable(_message(exc)) from None
    return values


def int_slices(
    path: Path, table: str, exprs: list[str], names: list[str], where: str, rows: int | None, after: int
) -> Iterator[tuple[int, dict[str, pa.Array]]]:
    """`int_columns` over the rows of `table` matching `where` with rowid > `after`, in rowid order, a slice of
    at most `rows` rows at a time (None: one slice), each with the rowid of its last row: the driver's record
    batches are read as they come, so only one slice is ever held. A column the driver stops at (a value of
    another type than its first rows') sends the query round again, every expression wrapped, from the last slice
    handed out. Raises Unreadable where the driver cannot run it; the caller carries on from the last rowid."""
    wrapped = False
    while True:
        selected = list(map(as_int_sql, exprs)) if wrapped else exprs
        sql = (f"SELECT rowid, {', '.join(selected)} FROM {table} WHERE ({where or 1}) AND rowid > {after} "
               "ORDER BY rowid")
        try:
            for table_slice in _slices(path, sql, rows):
                if not all(_integral(t) for t in table_slice.schema.types):
                    raise Unreadable("not integers")
                columns = [c.combine_chunks() if c.num_chunks != 1 else c.chunk(0) for c in table_slice.columns]
                last = columns[0][-1].as_py()
                out = {n: v if v.type == pa.int64() else v.cast(pa.int64())
                       for n, v in zip(names, columns[1:], strict=True)}
                yield last, out
                after = last
            return
        except Unreadable:
            if wrapped:
                raise
            wrapped = True


# Rows per record batch the driver hands over while a query is read (its default is 1024), when no slice size is
# asked for; else a slice's rows: a slice is then the driver's one batch, its columns taken as they are, not copied
# together from smaller batches (on the 1M-kernel export 64K-row batches cost 0.3-0.5 CPU-s more and 170 MB more peak
# memory for the kernel table). The driver builds a batch as it goes (nothing is reserved for a short result), and
# types each column from its first batch.
BATCH_ROWS = 1 << 20


def _slices(path: Path, sql: str, rows: int | None) -> Iterator[pa.Table]:
    """The rows of `sql` as Arrow tables of at least `rows` rows each (the last one: what remains; never an empty
    one), read a record batch at a time."""
    try:
        import adbc_driver_manager
        import adbc_driver_sqlite
    except ImportError as exc:  # pragma: no cover - a pinned dependency; kept for partial installs
        raise Unreadable(str(exc)) from None
    handles: list[Any] = []
    try:
        try:
            handles.append(adbc_driver_sqlite.connect(uri(path)))
            handles.append(adbc_driver_manager.AdbcConnection(handles[0]))
            handles.append(adbc_driver_manager.AdbcStatement(handles[1]))
            batch_rows = BATCH_ROWS if rows is None else rows
            handles[2].set_options(**{"adbc.sqlite.query.batch_rows": str(batch_rows)})
            handles[2].set_sql_query(sql)
            stream, _ = handles[2].execute_query()
            batches = pa.RecordBatchReader._import_from_c(stream.address)
            held: list[pa.RecordBatch] = []
            count = 0
            for batch in batches:
                if batch.num_rows:
                    held.append(batch)
                    count += batch.num_rows
                if rows is not None and count >= rows:
                    yield pa.Table.from_batches(held)
                    held, count = [], 0
            if held:
                yield pa.Table.from_batches(held)
        except (adbc_driver_manager.Error, OSError, pa.ArrowException) as exc:
            raise Unreadable(_message(exc)) from None
    finally:
        for handle in reversed(handles):  # statement, connection, database
            handle.close()


def _message(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _integral(kind: pa.DataType) -> bool:
    return bool(pa.types.is_integer(kind) or pa.types.is_null(kind))


def _query(path: Path, sql: str) -> pa.Table:
    """The rows of `sql` as one Arrow table, through the driver's low-level API (its DB-API layer imports pandas:
    +0.2 s per process)."""
    try:
        import adbc_driver_manager
        import adbc_driver_sqlite
    except ImportError as exc:  # pragma: no cover - a pinned dependency; kept for partial installs
        raise Unreadable(str(exc)) from None
    handles: list[Any] = []
    try:
        handles.append(adbc_driver_sqlite.connect(uri(path)))
        handles.append(adbc_driver_manager.AdbcConnection(handles[0]))
        handles.append(adbc_driver_manager.AdbcStatement(handles[1]))
        handles[2].set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
        handles[2].set_sql_query(sql)
        stream, _ = handles[2].execute_query()
        return pa.RecordBatchReader._import_from_c(stream.address).read_all()
    except (adbc_driver_manager.Error, OSError, pa.ArrowException) as exc:
        raise Unreadable(_message(exc)) from None
    finally:
        for handle in reversed(handles):  # statement, connection, database
            handle.close()


def within(values: pa.Array, bounds: tuple[int, int]) -> pa.Array:
    """`values` with every integer outside `bounds` (inclusive) replaced by null; checked on the column's
    min/max first, so a column within range is returned as is."""
    lo, hi = bounds
    if lo <= -(2**63) and hi >= I64_MAX or len(values) == 0:
        return values
    span = pc.min_max(values)
    low, high = span["min"].as_py(), span["max"].as_py()
    if low is None or (lo <= low and high <= hi):
        return values
    v = ints(values, lo)
    return int64_array(v, valid(values) & (v >= lo) & (v <= hi))


def span_ok(start: pa.Array, end: pa.Array) -> pa.Array | None:
    """Which rows have a start and an end with end >= start and a duration that fits int64; None when all do."""
    if len(start) == 0:
        return None
    if not start.null_count and not end.null_count:  # the usual case, in two passes (numpy views of the buffers)
        s, e = numbers(start), numbers(end)
        if s.min() >= 0 and bool(np.all(e >= s)):  # a start >= 0: any end fits the duration
            return None
    s, e = ints(start, 0), ints(end, 0)
    # end - start <= I64_MAX; only a negative start can break it, then end <= I64_MAX + start does not overflow (a
    # start >= 0 wraps that sum around, but needs no such check).
    with np.errstate(over="ignore"):
        ok = valid(start) & valid(end) & (e >= s) & ((s >= 0) | (e <= s + I64_MAX))
    if ok.all():
        return None
    return pa.Array.from_buffers(pa.bool_(), len(ok), [None, pa.py_buffer(np.packbits(ok, bitorder="little"))])


def dictionary(codes: pa.Array, labels: list[Any]) -> pa.DictionaryArray:
    """A dictionary-encoded string column: row i is labels[codes[i]] (a null code: a null row)."""
    return pa.DictionaryArray.from_arrays(codes.cast(pa.int32()), string_array(labels, len(labels)))


def lookup(ids: pa.Array, values: dict[int, Any], missing: Any = None) -> pa.DictionaryArray:
    """Each id of `ids` replaced by `values[id]` (`missing` for ids without one, and for null ids), as a
    dictionary array (one dictionary entry per distinct id)."""
    distinct = pc.unique(ids)
    labels = [missing if i is None else values.get(i, missing) for i in distinct.to_pylist()]
    return dictionary(pc.index_in(ids, value_set=distinct), labels)


def count_codes(codes: pa.Array, wanted: Iterable[int]) -> int:
    """How many entries of `codes` are one of `wanted`."""
    chosen = sorted({int(w) for w in wanted if w >= 0})
    if not chosen or not len(codes):
        return 0
    table = np.zeros(chosen[-1] + 2, bool)  # code -> chosen; the last entry for codes past the largest chosen
    table[chosen] = True
    c = np.minimum(ints(codes, -1), chosen[-1] + 1)
    return int(np.count_nonzero(table[c] & (c >= 0)))
