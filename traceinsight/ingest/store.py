"""The normalized DuckDB database: create it, load readers' output into it, query it."""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from traceinsight.ingest.arrow_numpy import COMPUTE_MIN_ROWS, ints, text_bytes
from traceinsight.ingest.base import Columns, Ingest
from traceinsight.ingest.kernel_names import NameIds, known
from traceinsight.ingest.schema import schema_sql, stored_table_names
from traceinsight.tuning import arrow_pool

# Tables whose rows get a per-trace id in start order, and the name of that id column (`kernels` is stored as
# `kernel_rows`, its names in `kernel_names`: see `TraceDB._stored`).
_ID_COLUMNS = {"kernel_rows": "kernel_id", "ranges": "range_id"}
# Tables whose rows get dur_ns = end_ns - start_ns on insert.
_DURATION_TABLES = {"kernel_rows", "ranges", "memops", "host_ops"}
# In memory, tables are kept as inserted — a text once per row — until a checkpoint compresses them
# (dictionary/FSST). Kernels' names were the bulk of it (920 bytes of FlashInfer's templated names per kernel, 1.4
# GB -> 80 MB for a million kernels) until they became ids (`kernel_names`); launch, range and memop names remain.
# An insert carrying more text than this is done in slices of about this much, each compressed before the next: a
# long trace then needs the memory of one slice, not all its text (at 400 MB the 1M-kernel export's ingest peaked
# at 1.7 GB instead of 2.2 GB, in the same time, while its kernels still carried their names).
CHECKPOINT_TEXT_BYTES = 400_000_000
# DuckDB's rows per row group (its `row_group_size`): the slices of a long insert are whole row groups, so that no
# checkpoint compresses a part-filled last group the next slice then fills and compresses again (the 1M-kernel
# export's kernels: 0.2 CPU-s of 2.1 less, and a tenth fewer page faults).
ROW_GROUP_ROWS = 122_880
# In-memory tables larger than this are compressed once loaded (TraceDB.compress).
COMPRESS_MIN_BYTES = 256_000_000
# The in-memory database's name (attached with compression; see CHECKPOINT_TEXT_BYTES).
MEMORY_DB = "traceinsight"


# The environment variable (set by `--memory-limit` too) that caps DuckDB's memory, e.g. '8GB'.
MEMORY_LIMIT_ENV = "TRACEINSIGHT_MEMORY_LIMIT"
# A size as DuckDB writes and reads it: a number and, for a limit, a unit ('6.3 GiB', '512MB', '8GB').
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)


def memory_limit() -> str | None:
    """The memory limit asked for ($TRACEINSIGHT_MEMORY_LIMIT), checked; None for the fitted default
    (`TraceDB.fit_memory`)."""
    value = os.environ.get(MEMORY_LIMIT_ENV, "").strip()
    if not value:
        return None
    m = _SIZE.match(value)
    if not m or not m.group(2):
        from traceinsight.errors import InputError

        raise InputError(f"memory limit {value!r}: expected a size such as 8GB, 512MB or 16GiB")
    return value.replace(" ", "")


# Without a limit from the user, DuckDB gets its own default budget (80 % of the machine's memory, or of the
# container's: DuckDB reads the cgroup limit) less what the rest of the process holds, re-fitted between stages
# (TraceDB.fit_memory); never less than this (bytes): below it, spill files instead of an error.
MIN_FITTED_LIMIT_BYTES = 256 * 2**20
# A streamed result (TraceDB.stream) fits DuckDB's limit again every this many record batches.
FIT_EVERY_BATCHES = 8
# Set in each worker of a local fleet pool (fleet/runners.py) to the number of workers: they share that default
# budget, each its part of it less what it holds itself.
MEMORY_SHARE_ENV = "TRACEINSIGHT_MEMORY_SHARE"
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str) -> int | None:
    """Bytes of a size as DuckDB writes and reads them ('6.3 GiB', '512MB', '8GB'); None when it is not one."""
    m = _SIZE.match(text)
    if not m:
        return None
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "").upper()])


def memory_share() -> int:
    """How many processes share DuckDB's default budget ($TRACEINSIGHT_MEMORY_SHARE, at least 1)."""
    try:
        return max(1, int(os.environ.get(MEMORY_SHARE_ENV, "1")))
    except ValueError:
        return 1


def resident_bytes() -> int | None:
    """This process's resident memory now (bytes), from /proc; None where there is no /proc."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def spill_dir() -> Path:
    """Where DuckDB spills what does not fit in memory: the cache folder, never the working directory. DuckDB
    makes this folder when it first spills, but not the folders above it: while the cache folder does not exist
    (a first run, or the cache off), a folder of this user's in the system's temporary folder instead (nothing is
    created until a query spills)."""
    import tempfile

    from traceinsight.ingest.cache import cache_root

    root = cache_root()
    if root.is_dir():
        return root / "spill"
    return Path(tempfile.gettempdir()) / f"traceinsight-spill-{os.getuid() if hasattr(os, 'getuid') else 'user'}"


def insert_in_slices(con: duckdb.DuckDBPyConnection, insert: str, arrow: pa.Table, per_slice: int) -> None:
    """Run `insert` (SQL that reads the Arrow table `rows` by name) over `arrow` `per_slice` rows at a time, each
    slice compressed (a checkpoint) before the next: a compressed in-memory database holds rows as inserted until
    a checkpoint, so a long insert then needs the memory of one slice."""
    for first in range(0, arrow.num_rows, per_slice):
        rows = arrow.slice(first, per_slice)  # noqa: F841  (scanned by name)
        con.execute(insert)
        con.execute("CHECKPOINT")


class TraceDB:
    """One DuckDB connection holding the normalized tables of one or more traces, its memory capped by
    `memory_limit()` and its spill files under `spill_dir()`."""

    def __init__(self, path: str | os.PathLike[str] | None = None, read_only: bool = False) -> None:
        arrow_pool()  # the command's choice (traceinsight.tuning), nothing when the library is called
        self.path = str(path) if path is not None else ":memory:"
        self.con = duckdb.connect(self.path, read_only=read_only)
        limit = memory_limit()
        if limit is not None:
            self.con.execute(f"SET memory_limit = '{limit}'")
        # DuckDB's default limit (the budget fit_memory shares with Python), None when the user set one; this
        # process's part of it when workers share it (memory_share).
        self.budget_bytes: int | None = None
        if limit is None:
            row = self.con.execute("SELECT current_setting('memory_limit')").fetchone()
            self.budget_bytes = parse_size(str(row[0])) if row else None
            share = memory_share()
            if self.budget_bytes is not None and share > 1:
                self.budget_bytes = max(MIN_FITTED_LIMIT_BYTES, self.budget_bytes // share)
                self.con.execute(f"SET memory_limit = '{self.budget_bytes // 2**20}MiB'")
        self.con.execute(f"SET temp_directory = '{quote_path(spill_dir())}'")
        # DuckDB's allocator (jemalloc on Linux) keeps what a query freed until a later allocation purges it: on
        # the 1M-kernel export the step breakdown's query left 350 MB resident while Python built the next stage's
        # objects. Its background thread gives it back within a second or two.
        self.con.execute("SET allocator_background_threads = true")
        self.in_memory = path is None
        if self.in_memory:
            self.con.execute(f"ATTACH ':memory:' AS {MEMORY_DB} (COMPRESS)")
            self.con.execute(f"USE {MEMORY_DB}")
        if not read_only:
            self.con.execute(schema_sql())
        # The one worker thread of `start_worker`, its cursor, and what it raised (not a DuckDB or OS error).
        self._worker: threading.Thread | None = None
        self._worker_cursor: duckdb.DuckDBPyConnection | None = None
        self._worker_error: BaseException | None = None
        # Each trace's kernel name ids (`_stored`), kept across the slices of its kernels.
        self._name_ids: dict[int, NameIds] = {}

    def close(self) -> None:
        """Close the connection, once the worker (`start_worker`) has finished."""
        try:
            self.join_worker()
        finally:
            self.con.close()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of its own to this database (DuckDB allows one per thread), on the same tables as `con`."""
        cursor = self.con.cursor()
        if self.in_memory:
            cursor.execute(f"USE {MEMORY_DB}")
        return cursor

    def start_worker(self, work: Callable[[duckdb.DuckDBPyConnection], None], name: str) -> None:
        """Run `work` on a thread of its own with a cursor of its own (`cursor`), while the caller goes on: DuckDB
        releases the GIL while it runs a statement, so DuckDB work (the ingest cache's copy) runs beside the
        analysis's Python. One worker at a time (a second waits for the first); `join_worker` and `close` join
        it, so that no thread outlives what started it."""
        self.join_worker()
        cursor = self.cursor()

        def run() -> None:
            try:
                work(cursor)
            except BaseException as e:  # handed to the thread that joins
                self._worker_error = e
            finally:
                cursor.close()

        self._worker_cursor = cursor
        self._worker = threading.Thread(target=run, name=name)
        self._worker.start()

    def join_worker(self, cancel: bool = False) -> None:
        """Wait for the worker of `start_worker` to end and raise what it raised; `cancel`: interrupt what it runs
        first (a statement interrupted raises duckdb.InterruptException in the worker, which its work handles as
        any DuckDB error), and raise nothing of it (the caller is leaving on an error of its own)."""
        worker, cursor = self._worker, self._worker_cursor
        if worker is None or cursor is None:
            return
        while worker.is_alive():
            if cancel:  # every pass: the work may have started its next statement
                with contextlib.suppress(duckdb.Error):  # the worker closed its cursor as it ended
                    cursor.interrupt()
            worker.join(0.05 if cancel else None)
        self._worker = self._worker_cursor = None
        error, self._worker_error = self._worker_error, None
        if error is not None and not cancel:
            raise error

    def duckdb_bytes(self) -> int:
        """What DuckDB's buffer manager holds now (bytes, summed over `duckdb_memory()`; its own cursor, so that
        an unfinished result of `con` stays as it is)."""
        with self.con.cursor() as cursor:
            row = cursor.execute("SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory()").fetchone()
        return int(row[0]) if row else 0

    def fit_memory(self) -> None:
        """Without a limit from the user: DuckDB's limit = its default budget less what the rest of the process
        holds now (resident memory less DuckDB's own), at least MIN_FITTED_LIMIT_BYTES. DuckDB's default budget
        alone ignores the analysis's Python objects: on the 10M-kernel export the step breakdown's sort took ~4.5
        GB while the earlier stages held ~4 GB, and the process went over the machine's memory (docs/SCALE.md).
        Called between the pipeline's stages; a no-op when the user set a limit or /proc is missing."""
        if self.budget_bytes is None:
            return
        rss = resident_bytes()
        if rss is None:
            return
        held = max(0, rss - self.duckdb_bytes())
        limit = max(MIN_FITTED_LIMIT_BYTES, self.budget_bytes - held)
        try:
            with self.con.cursor() as cursor:  # its own: `con` may be streaming a result (`stream`)
                cursor.execute(f"SET GLOBAL memory_limit = '{limit // 2**20}MiB'")
        except duckdb.Error:
            pass  # DuckDB holds more than that and cannot give it back now: keep the limit in force

    def stream(self, result: duckdb.DuckDBPyRelation, batch_rows: int) -> Iterator[pa.RecordBatch]:
        """`result`'s rows as Arrow record batches of `batch_rows`, DuckDB's limit fitted again (`fit_memory`)
        before the first and every FIT_EVERY_BATCHES after: the caller turns the batches into the analysis's
        objects, which grow while DuckDB's buffers (the stage's scratch tables, the query's state) stay held. On
        the 10M-kernel export the steps stage built ~2.7 GB of steps and launches while DuckDB kept the limit
        fitted at its start, and the process peaked ~1.4 GB above the budget."""
        self.fit_memory()
        for i, batch in enumerate(result.to_arrow_reader(batch_rows), start=1):
            yield batch
            if i % FIT_EVERY_BATCHES == 0:
                self.fit_memory()

    def __enter__(self) -> TraceDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ loading
    def next_trace_id(self) -> int:
        row = self.con.execute("SELECT coalesce(max(trace_id) + 1, 0) FROM traces").fetchone()
        return int(row[0]) if row else 0

    def add(
        self,
        ingest: Ingest,
        path: Path,
        source_path: Path | None = None,
        attach_to: int | None = None,
        consume: bool = False,
    ) -> int:
        """Insert one reader's output as a new trace and return its trace_id; or, with `attach_to`, add its
        rows (ncu metrics, a sidecar's batches) to that existing trace. `consume`: empty the reader's column
        lists as each table is inserted (peak memory holds one table twice, not all of them)."""
        trace_id = self.next_trace_id() if attach_to is None else attach_to
        for table, cols in ingest.tables.items():
            self._insert(trace_id, table, cols, consume)
        for table, slices in ingest.slices.items():
            self._insert_slices(trace_id, table, slices)
        if attach_to is not None:
            if ingest.warnings:  # what the attached file's reader warned of (a sidecar source without KV lengths)
                self.con.execute("UPDATE traces SET warnings = list_concat(coalesce(warnings, []), $w::VARCHAR[]) "
                                 "WHERE trace_id = $t", {"w": list(ingest.warnings), "t": trace_id})
            return trace_id
        # GPU work hidden inside graph replays (nsys --cuda-graph-trace=graph) is GPU activity too.
        span = self.con.execute(
            "SELECT min(start_ns), max(end_ns) FROM (SELECT start_ns, end_ns FROM kernels WHERE trace_id = $t "
            "UNION ALL SELECT start_ns, end_ns FROM memops WHERE trace_id = $t "
            "UNION ALL SELECT gpu_start_ns, gpu_end_ns FROM graph_replays WHERE trace_id = $t AND hidden)",
            {"t": trace_id},
        ).fetchone()
        self.con.execute(
            "INSERT INTO traces (trace_id, path, format, format_version, tool_version, source_path, size_bytes, "
            "start_ns, end_ns, warnings, rank, world_size, dist_backend, process_groups) "
            "VALUES ($id, $path, $fmt, $fv, $tv, $src, $size, $s, $e, $w, $rank, $world, $backend, $groups)",
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
                "rank": ingest.rank,
                "world": ingest.world_size,
                "backend": ingest.dist_backend,
                "groups": ingest.process_groups,
            },
        )
        return trace_id

    def _insert(self, trace_id: int, table: str, cols: Columns, consume: bool = False) -> None:
        """Insert columns as rows of `table` for `trace_id`; rows of the id tables are ordered by (start_ns,
        end_ns DESC) and numbered in that order (a stable sort: ties keep the reader's order). DuckDB keeps the
        insertion order (`preserve_insertion_order`), so the rows also lie in id order.

        Fewer than COMPUTE_MIN_ROWS rows whose text fits one insert are put in order by the insert itself, Python
        lists read by DuckDB as they are (through Arrow they took 10 ms a table more). More are sorted on an Arrow
        table first (unless already in order), so DuckDB never sorts wide rows (kernel names are long)."""
        n = len(next(iter(cols.values()))) if cols else 0
        if not n:
            return
        given = cols
        table, cols = self._stored(trace_id, table, cols, n)
        if consume and cols is not given:
            given.clear()
        if n < COMPUTE_MIN_ROWS and all(isinstance(v, list) for v in cols.values()) and (
                not self.in_memory or _text_bytes_at_most(cols) <= CHECKPOINT_TEXT_BYTES):
            rows = {name: np.fromiter(values, dtype=object, count=n) for name, values in cols.items()}
            if consume:
                cols.clear()
            self._insert_rows(trace_id, table, rows, n)
            return
        arrow = arrow_table(self.con, cols)
        if consume:
            cols.clear()
        text = _text_bytes(arrow) if self.in_memory else 0
        if table in _ID_COLUMNS and not _in_start_order(arrow):
            if n < COMPUTE_MIN_ROWS and text <= CHECKPOINT_TEXT_BYTES:
                self._insert_rows(trace_id, table, arrow, n)
                return
            import pyarrow.compute as pc  # 70 ms to import: only for long tables

            arrow = arrow.take(pc.sort_indices(arrow, sort_keys=[("start_ns", "ascending"), ("end_ns", "descending")]))
        if table in _ID_COLUMNS:
            arrow = arrow.append_column(_ID_COLUMNS[table], _int64_range(self._next_id(trace_id, table), n))
        self._append(trace_id, table, arrow, text)

    def _insert_slices(self, trace_id: int, table: str, slices: Iterator[Columns]) -> None:
        """Insert a table read a slice at a time (`Ingest.slices`), each slice as it comes, so that only one is
        held. An id table's rows are numbered in reading order; where that is not start order (a slice out of
        order, or out of order with the one before), they are put in start order in DuckDB once all are in."""
        name, table = table, _STORED.get(table, table)
        first = self._next_id(trace_id, table) if table in _ID_COLUMNS else 0
        count, ordered, last, held = 0, True, None, 0
        for given in slices:
            n = len(next(iter(given.values()))) if given else 0
            cols = self._stored(trace_id, name, given, n)[1] if n else given
            if cols is not given:
                given.clear()
            arrow = arrow_table(self.con, cols)
            cols.clear()
            n = arrow.num_rows
            if not n:
                continue
            if table in _ID_COLUMNS:
                if ordered:
                    head = (arrow.column("start_ns")[0].as_py(), arrow.column("end_ns")[0].as_py())
                    ordered = _in_start_order(arrow) and (last is None or _follows(last, head))
                    last = (arrow.column("start_ns")[-1].as_py(), arrow.column("end_ns")[-1].as_py())
                arrow = arrow.append_column(_ID_COLUMNS[table], _int64_range(first + count, n))
            text = _text_bytes(arrow) if self.in_memory else 0
            self._append(trace_id, table, arrow, text)
            count += n
            if self.in_memory:  # compressed every CHECKPOINT_TEXT_BYTES inserted (text, or numbers, as held here)
                held += text + arrow.nbytes
                if held >= CHECKPOINT_TEXT_BYTES:
                    self.con.execute("CHECKPOINT")
                    held = 0
        if table in _ID_COLUMNS and not ordered:
            self._renumber(trace_id, table, first)
        elif held:
            # The rest compressed now, not with the other tables once all are in (`compress`): while the reader
            # reads the next table's slices (nsys_sqlite's worker), and its memory reused for them.
            self.con.execute("CHECKPOINT")

    def _stored(self, trace_id: int, table: str, cols: Columns, n: int) -> tuple[str, Columns]:
        """The table an insert of `n` rows `cols` into `table` writes, and its columns: `kernels` is stored as
        `kernel_rows`, each row's `name` and `mangled_name` as a `name_id` into `kernel_names`, which gets the
        pairs not seen before now (the readers' Arrow columns read as dictionary codes: no string per row)."""
        if table not in _STORED:
            return table, cols
        ids = self._names_of(trace_id)
        out = {k: v for k, v in cols.items() if k not in ("name", "mangled_name")}
        out["name_id"] = ids.column(cols["name"], cols.get("mangled_name"), n)
        self._write_names(trace_id, ids)
        return _STORED[table], out

    def name_id(self, trace_id: int, name: str, mangled_name: str | None = None) -> int:
        """The id in `kernel_names` of a kernel name of `trace_id` (added when new), for a row written into
        `kernel_rows` directly rather than by a reader (`add`)."""
        ids = self._names_of(trace_id)
        got = ids.of((name, mangled_name))
        self._write_names(trace_id, ids)
        return got

    def _names_of(self, trace_id: int) -> NameIds:
        """The name ids of `trace_id`, read from `kernel_names` at first use, its next new id the database's (ids
        are numbered across traces, whichever is added to)."""
        ids = self._name_ids.get(trace_id)
        if ids is None:
            rows = self.con.execute("SELECT name_id, name, mangled_name FROM kernel_names WHERE trace_id = $t",
                                    {"t": trace_id}).fetchall()
            ids = self._name_ids[trace_id] = NameIds(0, known(rows))
        ids.next = self._next_name_id()
        return ids

    def _write_names(self, trace_id: int, ids: NameIds) -> None:
        """Insert the names `ids` numbered since it was last written into `kernel_names`."""
        new = ids.take_new()
        if new:
            names = {  # noqa: F841  (scanned by name)
                "name_id": np.fromiter((r[0] for r in new), np.int32, len(new)),
                "name": np.fromiter((r[1] for r in new), object, len(new)),
                "mangled_name": np.fromiter((r[2] for r in new), object, len(new)),
            }
            self.con.execute(f"INSERT INTO kernel_names BY NAME SELECT *, {int(trace_id)} AS trace_id FROM names")

    def _next_name_id(self) -> int:
        """The id the next new kernel name gets: ids are numbered across the database's traces, so that `kernels`
        looks a row's names up by position in one list (schema.sql)."""
        row = self.con.execute("SELECT coalesce(max(name_id) + 1, 0) FROM kernel_names").fetchone()
        return int(row[0]) if row else 0

    def _renumber(self, trace_id: int, table: str, first: int) -> None:
        """Put the rows of `trace_id` in the id table `table` in start order and number them from `first` in that
        order (their ids so far, the reading order, break ties, as the stable sort of `_insert` does)."""
        column = _ID_COLUMNS[table]
        key = f"start_ns, end_ns DESC, {column}"
        self.con.execute(
            f"CREATE TEMP TABLE _ti_ordered AS SELECT * REPLACE (row_number() OVER (ORDER BY {key}) - 1 + {first} "
            f"AS {column}) FROM {table} WHERE trace_id = $t ORDER BY {key}", {"t": trace_id})
        try:
            self.con.execute(f"DELETE FROM {table} WHERE trace_id = $t", {"t": trace_id})
            self.con.execute(f"INSERT INTO {table} SELECT * FROM _ti_ordered")
        finally:
            self.con.execute("DROP TABLE _ti_ordered")

    def _append(self, trace_id: int, table: str, arrow: pa.Table, text: int) -> None:
        """Insert the rows of `arrow` (ids already numbered) into `table`; more text than CHECKPOINT_TEXT_BYTES in
        slices of about that much, each compressed before the next."""
        n = arrow.num_rows
        extra = self._derived(trace_id, table)
        insert = f"INSERT INTO {table} BY NAME SELECT *, {', '.join(extra)} FROM rows"
        if text <= CHECKPOINT_TEXT_BYTES:
            rows = arrow  # noqa: F841  (scanned by name)
            self.con.execute(insert)
            return
        per_slice = max(1, n * CHECKPOINT_TEXT_BYTES // text)
        insert_in_slices(self.con, insert, arrow, max(ROW_GROUP_ROWS, per_slice // ROW_GROUP_ROWS * ROW_GROUP_ROWS))

    def _insert_rows(self, trace_id: int, table: str, rows: pa.Table | dict[str, np.ndarray], n: int) -> None:
        """One insert of `rows` (an Arrow table, or numpy arrays of Python values, scanned by DuckDB) into `table`,
        an id table's rows put in start order and numbered by the insert (the reader's position breaks ties, as
        the stable sort does)."""
        extra = self._derived(trace_id, table)
        columns, ordered = "*", ""
        if table in _ID_COLUMNS:
            if isinstance(rows, dict):
                rows[_READ_ORDER] = np.arange(n, dtype=np.int64)
            else:
                rows = rows.append_column(_READ_ORDER, _int64_range(0, n))
            key = f"start_ns, end_ns DESC, {_READ_ORDER}"
            extra.append(f"row_number() OVER (ORDER BY {key}) - 1 + {self._next_id(trace_id, table)} "
                         f"AS {_ID_COLUMNS[table]}")
            columns, ordered = f"* EXCLUDE ({_READ_ORDER})", f" ORDER BY {key}"
        self.con.execute(f"INSERT INTO {table} BY NAME SELECT {columns}, {', '.join(extra)} FROM rows{ordered}")

    @staticmethod
    def _derived(trace_id: int, table: str) -> list[str]:
        """The columns an insert adds to a reader's: the trace's id, and a duration where the table has one."""
        extra = [f"{trace_id} AS trace_id"]
        if table in _DURATION_TABLES:
            extra.append("end_ns - start_ns AS dur_ns")
        return extra

    def _next_id(self, trace_id: int, table: str) -> int:
        """The id the next row of `trace_id` in the id table `table` gets."""
        column = _ID_COLUMNS[table]
        row = self.con.execute(f"SELECT coalesce(max({column}) + 1, 0) FROM {table} WHERE trace_id = $t",
                               {"t": trace_id}).fetchone()
        return int(row[0]) if row else 0

    def compress(self) -> None:
        """Compress the in-memory tables now that they are loaded (a checkpoint: dictionary/FSST). A million
        FlashInfer kernels with their launches and memory operations hold 1.4 GB as inserted and 80 MB after it
        (1.1 s), memory the analysis then reuses; below COMPRESS_MIN_BYTES it is not worth the time."""
        if not self.in_memory:
            return
        row = self.con.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory() "
                               "WHERE tag = 'IN_MEMORY_TABLE'").fetchone()
        if row and row[0] and int(row[0]) >= COMPRESS_MIN_BYTES:
            self.con.execute(f"FORCE CHECKPOINT {MEMORY_DB}")

    # ------------------------------------------------------------------ one trace to and from its own file
    def save_trace(self, trace_id: int, dest: Path, con: duckdb.DuckDBPyConnection | None = None) -> None:
        """Write the rows of `trace_id` (as trace 0) into a new DuckDB file `dest` with the normalized schema,
        through `con` (default `self.con`; the worker's cursor, `start_worker`)."""
        con = con or self.con
        new = duckdb.connect(str(dest))
        try:
            new.execute(schema_sql())
        finally:
            new.close()
        alias = "_ti_save"
        # The trace's kernel name ids from 0, as a database of its own numbers them (they follow one another).
        row = con.execute("SELECT coalesce(min(name_id), 0), count(*), coalesce(max(name_id) + 1, 0) FROM kernel_names "
                          "WHERE trace_id = $t", {"t": trace_id}).fetchone()
        base = int(row[0]) if row else 0
        if row and row[1] != row[2] - row[0]:  # its kernels added between another trace's: not saved (`save` skips it)
            raise duckdb.InvalidInputException(f"trace {trace_id}: its kernel name ids do not follow one another")
        con.execute(f"ATTACH '{quote_path(dest)}' AS {alias}")
        try:
            for table in stored_table_names():
                con.execute(
                    f"INSERT INTO {alias}.{table} SELECT * REPLACE (0 AS trace_id{_name_id_plus(table, -base)}) "
                    f"FROM {table} WHERE trace_id = $t",
                    {"t": trace_id},
                )
            con.execute(f"CHECKPOINT {alias}")
        finally:
            con.execute(f"DETACH {alias}")

    def add_saved(self, src: Path, path: Path, source_path: Path | None = None) -> int:
        """Add the trace saved in `src` (by `save_trace`) as a new trace; its `traces` row takes `path` (and
        `source_path` when given) and the current size of `path`. Returns the new trace_id."""
        trace_id = self.next_trace_id()
        alias = "_ti_saved"
        self.con.execute(f"ATTACH '{quote_path(src)}' AS {alias} (READ_ONLY)")
        try:
            n = self.con.execute(f"SELECT count(*) FROM {alias}.traces").fetchone()
            if not n or n[0] != 1:
                raise duckdb.InvalidInputException(f"{src}: not one saved trace")
            base = self._next_name_id()
            self.con.execute("BEGIN TRANSACTION")
            try:
                for table in stored_table_names():
                    replace = f"{trace_id} AS trace_id{_name_id_plus(table, base)}"
                    if table == "traces":
                        replace += ", $path AS path, coalesce($src, source_path) AS source_path, $size AS size_bytes"
                        params = {
                            "path": str(path),
                            "src": str(source_path) if source_path else None,
                            "size": path.stat().st_size if path.exists() else None,
                        }
                    else:
                        params = {}
                    self.con.execute(
                        f"INSERT INTO {table} SELECT * REPLACE ({replace}) FROM {alias}.{table}", params or None
                    )
                self.con.execute("COMMIT")
            except BaseException:
                self.con.execute("ROLLBACK")
                raise
        finally:
            self.con.execute(f"DETACH {alias}")
        return trace_id

    # ------------------------------------------------------------------ querying
    def sql(self, query: str, params: dict[str, Any] | list[Any] | None = None) -> duckdb.DuckDBPyConnection:
        return self.con.execute(query, params) if params is not None else self.con.execute(query)

    def script(self, text: str, params: dict[str, Any]) -> duckdb.DuckDBPyConnection:
        """Run a named query of several statements (each ending with ';' at the end of a line), each with the
        named parameters it uses (DuckDB binds parameters to one statement at a time)."""
        cur = self.con
        for statement in (s for s in re.split(r";[ \t]*\n", text) if s.strip() and not _only_comments(s)):
            code = re.sub(r"--[^\n]*", "", statement)  # a parameter named in a comment is not used
            used = {k: v for k, v in params.items() if re.search(rf"\${k}\b", code)}
            cur = self.con.execute(statement, used) if used else self.con.execute(statement)
        return cur

    def rows(self, query: str, params: dict[str, Any] | list[Any] | None = None) -> list[dict[str, Any]]:
        """Run a query and return its rows as dicts."""
        cur = self.con.execute(query, params) if params is not None else self.con.execute(query)
        names = [d[0] for d in cur.description or []]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _only_comments(statement: str) -> bool:
    return all(not line.strip() or line.lstrip().startswith("--") for line in statement.splitlines())


def arrow_table(con: duckdb.DuckDBPyConnection, cols: Columns) -> pa.Table:
    """`cols` (Python lists or Arrow arrays) as an Arrow table, the lists converted by DuckDB rather than by
    `pa.array`: pyarrow's conversion of Python values first asks whether they are pandas objects, which imports
    pandas when it is installed (a third of a second of a fresh process, for a check that never applies here),
    and DuckDB converts faster (a million rows of a name and two integers: 0.44 s against 0.59 s). Integers come
    out as int64, the type pyarrow gives Python ints (DuckDB picks the narrowest that holds them)."""
    python_lists = {name: np.fromiter(values, dtype=object, count=len(values))
                    for name, values in cols.items() if isinstance(values, list)}
    converted = None
    if python_lists:
        with con.cursor() as cursor:  # its own: `con` may hold an unfinished result
            lists = cursor.sql("SELECT * FROM python_lists")
            # Integers as BIGINT in DuckDB (pyarrow's `cast` imports pyarrow.compute: 70 ms of a fresh process).
            converted = lists.select(*(
                duckdb.ColumnExpression(name).cast(duckdb.sqltype("BIGINT")).alias(name)
                if kind.id in _INTEGER_TYPES else duckdb.ColumnExpression(name)
                for name, kind in zip(lists.columns, lists.types, strict=True))).to_arrow_table()
    out: dict[str, pa.Array | pa.ChunkedArray] = {}
    for name, values in cols.items():
        out[name] = values if converted is None or name not in python_lists else converted.column(name)
    return pa.table(out)


# DuckDB's integer types (DuckDBPyType.id), which `arrow_table` makes BIGINT.
_INTEGER_TYPES = frozenset({"tinyint", "smallint", "integer", "bigint", "hugeint", "utinyint", "usmallint",
                            "uinteger", "ubigint", "uhugeint"})


def _int64_range(start: int, n: int) -> pa.Array:
    """start, start + 1, ... (n values) as an Arrow array (not through `pa.array`: see `arrow_table`)."""
    return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(np.arange(start, start + n, dtype=np.int64))])


def _text_bytes(table: pa.Table) -> int:
    """Bytes of text the rows of `table` hold once expanded (a dictionary column: each row's entry)."""
    return sum(text_bytes(chunk) for column in table.columns for chunk in column.chunks)


def _name_id_plus(table: str, shift: int) -> str:
    """The REPLACE item of a copy of `table` that shifts its kernel name ids by `shift` (none for other tables)."""
    return f", name_id + ({int(shift)}) AS name_id" if table in ("kernel_names", "kernel_rows") and shift else ""


# The tables stored as others: `kernels` (a view) as `kernel_rows`, its names in `kernel_names` (`TraceDB._stored`).
_STORED = {"kernels": "kernel_rows"}
# A column the insert of a small id table carries (the reader's row order, which breaks ties of the start order).
_READ_ORDER = "_read_order"


def _text_bytes_at_most(cols: Columns) -> int:
    """A bound on the bytes of text Python lists of values hold: UTF-8 takes at most 4 bytes a character."""
    return 4 * sum(len(v) for values in cols.values() for v in values if isinstance(v, str))


def _follows(before: tuple[Any, Any], after: tuple[Any, Any]) -> bool:
    """Whether a row starting and ending at `after` may follow one at `before` in start order."""
    return bool(after[0] > before[0] or (after[0] == before[0] and after[1] <= before[1]))


def _in_start_order(table: pa.Table) -> bool:
    """Whether the rows of `table` are already in start order (start_ns ascending, then end_ns descending), with no
    NULL in either: then they need no sort."""
    start, end = table.column("start_ns"), table.column("end_ns")
    if start.null_count or end.null_count:
        return False
    s, e = (np.concatenate([ints(c, 0) for c in column.chunks]) for column in (start, end))
    if len(s) < 2:
        return True
    return bool(np.all((s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (e[1:] <= e[:-1]))))


def quote_path(path: Path) -> str:
    """A path as the body of a SQL string literal."""
    return str(path).replace("'", "''")
