"""Queries over one open Nsight Systems export (`ExportReader`), shared by the readers of its tables.

Tables appear in an export only when the capture used them, and columns come and go between schema versions, so
every query is built from the columns the file actually has (`col`: the column, or NULL). Strings (kernel, API,
NVTX names) are stored once in `StringIds` and referenced by id (`strings`). The large tables come back as Arrow
columns through the ADBC SQLite driver (`sqlite_arrow`), else through `sqlite3` (`fetch`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from traceinsight.ingest import sqlite_arrow
from traceinsight.ingest.arrow_numpy import int64_array
from traceinsight.ingest.base import Columns, Ingest
from traceinsight.ingest.limits import clip_names
from traceinsight.ingest.nsys_sql import I64, SQL_PARAMS, int_sql, is_damage, quote, text_sql, valid_span

# Rowids read per query; bounds the transient JSON text held while columns are built.
FETCH_ROWS = 1 << 21


class ExportReader:
    """Queries one open export; the readers of its tables (nsys_activity, nsys_nvtx, ...) fill `ingest`."""

    def __init__(
        self,
        con: sqlite3.Connection,
        tables: set[str],
        ingest: Ingest,
        arrow_path: Path | None = None,
        use_json: bool = True,
    ) -> None:
        self.con = con
        self.tables = tables
        self.ingest = ingest
        self.arrow_path = arrow_path  # None: the large tables too are read through `con`
        self.use_json = use_json
        self._cols: dict[str, set[str]] = {}

    def columns(self, table: str) -> set[str]:
        if table not in self._cols:
            self._cols[table] = {r[1] for r in self.con.execute(f"PRAGMA table_info({quote(table)})")}
        return self._cols[table]

    def col(self, table: str, name: str) -> str:
        """`name` (quoted) when `table` has that column, else the SQL literal NULL."""
        return quote(name) if name in self.columns(table) else "NULL"

    def int_col(self, table: str, name: str, bounds: tuple[int, int] = I64) -> str:
        """The integer value of column `name` within `bounds`, else NULL (also when the column is absent)."""
        return int_sql(self.col(table, name), bounds)

    def has_span(self, table: str) -> bool:
        return {"start", "end"} <= self.columns(table)

    def skipped_rows(self, table: str, where: str, label: str) -> None:
        """Warn about the rows of `table` matching `where` whose start/end are unusable."""
        n = self.con.execute(f"SELECT count(*) FROM {table} WHERE ({where}) AND NOT ({valid_span()})").fetchone()[0]
        if n:
            self.ingest.warnings.append(f"{n} {label} skipped: start/end not integers, or end before start ({table})")

    def fetch(self, table: str, exprs: list[str], names: list[str], where: str = "") -> Columns:
        """Evaluate `exprs` over the rows of `table` matching `where`, in rowid order; return one list per name
        (`fetch_slices`, joined)."""
        out: Columns = {n: [] for n in names}
        for _, part in self.fetch_slices(table, exprs, names, where):
            for name, values in part.items():
                if out[name] or not isinstance(values, list):
                    out[name].extend(values)
                else:  # the first slice's list is kept, not copied
                    out[name] = values
        return out

    def fetch_slices(
        self, table: str, exprs: list[str], names: list[str], where: str = "", after: int = -(2**63)
    ) -> Iterator[tuple[int, Columns]]:
        """`exprs` over the rows of `table` matching `where` with rowid > `after`, in rowid order: one list per name
        for each slice of FETCH_ROWS rows, with the rowid of the slice's last row.

        Rows are read in slices of FETCH_ROWS (a rowid seek each, so sparse rowids cost nothing). Each slice
        comes back as one JSON array per column (`json_group_array`, parsed with orjson), several times faster
        than Python's row-by-row cursor; where SQLite lacks JSON support, or a slice's text is not valid UTF-8,
        the slice is fetched as rows instead."""
        aliases = [f"c{i}" for i in range(len(exprs))]
        cond = f"({where})" if where else "1"
        sub = (
            f"SELECT rowid AS _rid, {', '.join(f'{e} AS {a}' for e, a in zip(exprs, aliases, strict=True))} "
            f"FROM {table} WHERE {cond} AND rowid > ? ORDER BY rowid LIMIT {FETCH_ROWS}"
        )
        while True:
            parts: list[Any] | None = None
            count, last = 0, None
            if self.use_json:
                try:
                    aggregates = ", ".join(f"json_group_array({a})" for a in aliases)
                    row = self.con.execute(f"SELECT count(*), max(_rid), {aggregates} FROM ({sub})", [after]).fetchone()
                    count, last = row[0], row[1]
                    parts = [orjson.loads(x) for x in row[2:]]
                except sqlite3.OperationalError as exc:  # no JSON1 in this SQLite
                    if is_damage(exc):
                        raise
                    self.use_json = False
                except orjson.JSONDecodeError:  # text that is not UTF-8 in this slice
                    parts = None
            if parts is None:
                rows = self.con.execute(sub, [after]).fetchall()
                count, last = len(rows), (rows[-1][0] if rows else None)
                parts = list(zip(*rows, strict=True))[1:] if rows else [() for _ in exprs]
            yield (last if last is not None else after), dict(zip(names, parts, strict=True))
            if count < FETCH_ROWS or last is None:
                return
            after = last

    def fetch_checked(
        self, table: str, spec: dict[str, tuple[str, tuple[int, int] | None]], label: str, where: str = ""
    ) -> dict[str, pa.Array]:
        """start_ns, end_ns and one int64 Arrow array per `spec` entry (name -> (column, bounds)) over the rows of
        `table` matching `where` whose start/end are usable, in rowid order; the others are counted in a warning.

        Values that are not integers, or not within `bounds` (None: any int64), read as null; an absent column
        reads as all null."""
        names = ["start_ns", "end_ns", *spec]
        exprs = ['"start"', '"end"', *(self.col(table, column) for column, _ in spec.values())]
        cols = self.int_arrays(table, exprs, names, where)
        return self.checked(table, cols, {name: bounds for name, (_, bounds) in spec.items()}, label)

    def checked(
        self, table: str, cols: dict[str, pa.Array], bounds: dict[str, tuple[int, int] | None], label: str
    ) -> dict[str, pa.Array]:
        """`cols` (start_ns, end_ns and others, int64) without the rows whose start/end are unusable (counted in
        a warning), and with the values of each column in `bounds` outside its bounds (None: any) nulled."""
        cols, skipped = checked_slice(cols, bounds)
        self.warn_skipped(skipped, table, label)
        return cols

    def warn_skipped(self, skipped: int, table: str, label: str) -> None:
        if skipped:
            self.ingest.warnings.append(
                f"{skipped} {label} skipped: start/end not integers, or end before start ({table})"
            )

    def checked_slices(
        self, table: str, spec: dict[str, tuple[str, tuple[int, int] | None]], label: str, where: str,
        rows: int | None,
    ) -> Iterator[dict[str, pa.Array]]:
        """`fetch_checked` a slice of at most `rows` rows at a time (None: one slice, empty where no row
        matches); the skipped rows are counted in one warning once the last slice is read."""
        names = ["start_ns", "end_ns", *spec]
        exprs = ['"start"', '"end"', *(self.col(table, column) for column, _ in spec.values())]
        bounds = {name: b for name, (_, b) in spec.items()}
        skipped, any_slice = 0, False
        for cols in self.int_slices(table, exprs, names, where, rows):
            cols, n = checked_slice(cols, bounds)
            skipped += n
            any_slice = True
            yield cols
        if not any_slice and rows is None:
            yield {n: pa.nulls(0, pa.int64()) for n in names}
        self.warn_skipped(skipped, table, label)

    def int_slices(
        self, table: str, exprs: list[str], names: list[str], where: str, rows: int | None
    ) -> Iterator[dict[str, pa.Array]]:
        """`int_arrays` a slice of at most `rows` rows at a time (None: one slice; none where no row matches):
        through the Arrow driver, else (from where the driver stopped) through `sqlite3`."""
        after = -(2**63)
        if self.arrow_path is not None:
            try:
                for last, cols in sqlite_arrow.int_slices(self.arrow_path, table, exprs, names, where, rows, after):
                    after = last  # where the `sqlite3` route carries on, should the driver stop
                    yield cols
                return
            except sqlite_arrow.Unreadable:
                self.arrow_path = None  # the same file again would fail the same way
        held: dict[str, list[Any]] = {n: [] for n in names}
        for _, part in self.fetch_slices(table, [int_sql(e) for e in exprs], names, where, after):
            for n, v in part.items():
                held[n].extend(v)
            if rows is not None and len(held[names[0]]) >= rows:
                yield {n: _int64s(v) for n, v in held.items()}
                held = {n: [] for n in names}
        if held[names[0]]:
            yield {n: _int64s(v) for n, v in held.items()}

    def int_arrays(self, table: str, exprs: list[str], names: list[str], where: str = "") -> dict[str, pa.Array]:
        """`exprs` over the rows of `table` matching `where`, in rowid order, as int64 arrays (values that are not
        integers read as null): through the Arrow driver, else through `sqlite3`."""
        if self.arrow_path is not None:
            cond = f"WHERE {where}" if where else ""
            try:
                return sqlite_arrow.int_columns(self.arrow_path, exprs, names, f"FROM {table} {cond} ORDER BY rowid")
            except sqlite_arrow.Unreadable:
                self.arrow_path = None  # the same file again would fail the same way
        lists = self.fetch(table, [int_sql(e) for e in exprs], names, where)
        return {n: _int64s(v) for n, v in lists.items()}

    def texts(self, table: str, expr: str, where: str) -> list[Any]:
        """`expr` (TEXT or NULL, `text_sql`) over the rows of `table` matching `where`, in rowid order: through the
        Arrow driver, else (text that is not UTF-8 among them) through `fetch`."""
        if self.arrow_path is not None:
            try:
                values: list[Any] = sqlite_arrow.text_column(
                    self.arrow_path, expr, f"FROM {table} WHERE {where} ORDER BY rowid").to_pylist()
                return values
            except sqlite_arrow.Unreadable:
                pass
        return list(self.fetch(table, [expr], ["_text"], where)["_text"])

    def strings(self, ids: Iterable[Any]) -> dict[int, str]:
        """StringIds values of `ids` (None, unknown ids and values that are not text are left out)."""
        wanted = sorted(i for i in set(ids) if isinstance(i, int))
        if not wanted or "StringIds" not in self.tables or not {"id", "value"} <= self.columns("StringIds"):
            return {}
        out: dict[int, str] = {}
        value = text_sql('"value"')
        for k in range(0, len(wanted), SQL_PARAMS):
            chunk = wanted[k : k + SQL_PARAMS]
            marks = ", ".join("?" * len(chunk))
            rows = self.con.execute(f'SELECT "id", {value} FROM StringIds WHERE "id" IN ({marks})', chunk)
            out.update((i, v) for i, v in rows if isinstance(i, int) and v is not None)
        return out

    def enum_ids(self, table: str, known: dict[str, int]) -> set[int]:
        """Ids of the enum names in `known`, read from the export's enum table when it has one."""
        if table in self.tables and {"id", "name"} <= self.columns(table):
            names = list(known)
            marks = ", ".join("?" * len(names))
            rows = self.con.execute(
                f'SELECT "id" FROM {table} WHERE "name" IN ({marks}) AND typeof("id") = \'integer\'', names
            ).fetchall()
            if rows:
                return {int(r[0]) for r in rows}
        return set(known.values())

    def clipped(self, names: list[Any], what: str) -> list[Any]:
        """Names cut to the configured length (`limits.max_name_chars`), with a warning counting them."""
        out, n = clip_names(names)
        self.warn_clipped(n, what)
        return out

    def clipped_codes(self, names: pa.DictionaryArray, what: str) -> pa.DictionaryArray:
        """`clipped` for a dictionary-encoded column: the dictionary is cut, the warning counts rows."""
        out, n = clip_codes(names)
        self.warn_clipped(n, what)
        return out

    def warn_clipped(self, n: int, what: str) -> None:
        if n:
            self.ingest.warnings.append(
                f"{n} {what} names longer than the limit were cut (TRACEINSIGHT_MAX_NAME_CHARS)"
            )


def _int64s(values: list[Any]) -> pa.Array:
    """Integers or None (any int64, its least one too) as an int64 Arrow array, from numpy buffers (`pa.array`
    imports pandas)."""
    n = len(values)
    present = np.fromiter((v is not None for v in values), bool, n)
    return int64_array(np.fromiter((0 if v is None else v for v in values), np.int64, n), present)


def clip_codes(names: pa.DictionaryArray) -> tuple[pa.DictionaryArray, int]:
    """A dictionary-encoded column with its dictionary cut to the configured length, and how many rows were."""
    labels = names.dictionary.to_pylist()
    out, n = clip_names(labels)
    if not n:
        return names, 0
    cut = [i for i, (a, b) in enumerate(zip(labels, out, strict=True)) if a != b]
    return sqlite_arrow.dictionary(names.indices, out), sqlite_arrow.count_codes(names.indices, cut)


def checked_slice(
    cols: dict[str, pa.Array], bounds: dict[str, tuple[int, int] | None]
) -> tuple[dict[str, pa.Array], int]:
    """`cols` (start_ns, end_ns and others, int64) without the rows whose start/end are unusable, with how many
    those were, and the values of each column in `bounds` outside its bounds (None: any) nulled."""
    skipped = 0
    keep = sqlite_arrow.span_ok(cols["start_ns"], cols["end_ns"])
    if keep is not None:
        skipped = len(keep) - int(pc.sum(keep).as_py() or 0)
        cols = {n: v.filter(keep) for n, v in cols.items()}
    for name, limits in bounds.items():
        if limits is not None:
            cols[name] = sqlite_arrow.within(cols[name], limits)
    return cols, skipped
