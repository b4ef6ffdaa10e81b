"""Reader for Nsight Systems SQLite exports (`nsys export --type sqlite`), export schemas 2.x and 3.x.

Tables appear in an export only when the capture used them, and columns come and go between schema versions,
so every query is built from the columns the file actually has (nsys_query). Strings (kernel, API, NVTX names) are
stored once in `StringIds` and referenced by id: rows are fetched with integer ids and resolved through one dict,
so a million launches of the same kernel share one name string. All times in an export are int64 nanoseconds.
This module opens the file and orders the work; one module per group of tables reads them (nsys_activity:
kernels, memory operations, launches; nsys_nvtx; nsys_devices; nsys_graph_replays).

The file is opened read-only and immutable (`mode=ro&immutable=1`): nothing, not even a journal or an index,
is ever written beside the user's export.

The large activity tables (kernels, memory operations, launches) come back as Arrow columns through the ADBC
SQLite driver (`sqlite_arrow`), with no Python object per value; string columns are dictionary-encoded (one
entry per distinct name), so a million launches of one kernel cost a million small integers. NVTX ranges go through
the driver too (their text as well: `sqlite_arrow.text_column`); the small tables (GPUs, enums, StringIds) are read
with `sqlite3`, which is also the route for the large ones wherever the driver cannot read the file.

Damaged input: SQLite stores any value in any column, so every value is checked: an integer out of its column's
range, a REAL, TEXT or BLOB where an integer belongs becomes None, and rows whose start/end are not integers with
end >= start are skipped and counted in a warning (Arrow compute for the large tables: `sqlite_arrow.within`,
`span_ok`; SQL for the small ones: nsys_sql). A file SQLite refuses (truncated by a crashed job or
a full disk, a damaged page) is salvaged page by page (`sqlite_salvage`) into a temporary database, and the
warning says where the data ends.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from traceinsight.errors import FormatError
from traceinsight.ingest import (
    nsys_activity,
    nsys_devices,
    nsys_graph_replays,
    nsys_nvtx,
    sqlite_arrow,
    sqlite_salvage,
)
from traceinsight.ingest.base import Columns, Ingest
from traceinsight.ingest.nsys_export import (
    GPU_TABLE,
    KERNEL_TABLE,
    MEMCPY_TABLE,
    MEMSET_TABLE,
    META_TABLES,
    NVTX_TABLE,
    RUNTIME_TABLE,
    SALVAGE_TABLES,
)
from traceinsight.ingest.nsys_query import ExportReader
from traceinsight.ingest.nsys_sql import first_line, is_damage, quote, text_sql
from traceinsight.ingest.prefetch import Prefetched

FORMAT = "nsys-sqlite"
# Tables whose absence from a salvaged export the warning names (optional ones like MEMSET are left out).
_REPORT_IF_MISSING = ("StringIds", RUNTIME_TABLE, NVTX_TABLE, GPU_TABLE)


# Rows of a large activity table read and inserted at a time: an export whose kernel, memory-operation or runtime
# table has more rows than this is read a slice at a time while the store inserts it (`Ingest.slices`), so
# its peak memory is a slice's, not the table's (a 10M-kernel export's tables held at once take ~3.4 GB of Arrow).
SLICE_ROWS = 1 << 20


def read(path: Path, slice_rows: int | None = SLICE_ROWS) -> Ingest:
    """Read an Nsight Systems SQLite export into the normalized tables (kernels, launches, ranges, memops,
    devices). A truncated or damaged file is salvaged: the rows still readable are used and the first warning
    says where the data ends. Raises FormatError (one line, starting with the path) for files with nothing to
    salvage and exports without CUDA kernel activity. Tables of more than `slice_rows` rows (None: no limit) are
    handed over a slice at a time (`Ingest.slices`), read while the store inserts them."""
    truncated = sqlite_salvage.is_truncated(path)

    def opened() -> sqlite3.Connection:
        con = connect(path)
        if truncated:
            # SQLite refuses any file shorter than its header says; with writable_schema it reads the pages that
            # are there (and still reports a page it needs past the end as corrupt, sending us to the salvage).
            con.execute("PRAGMA writable_schema = ON")
        return con

    con = opened()
    try:
        # SQLite reads a truncated file only with writable_schema, which the Arrow driver does not set.
        ingest = _read(con, path, opened, None if truncated else path, slice_rows)
    except sqlite3.Error as exc:
        if not is_damage(exc):
            raise FormatError(f"{path}: damaged SQLite database ({first_line(exc)})") from None
        damage = first_line(exc)
    else:
        if truncated:
            ingest.warnings.insert(
                0, f"{path.name} is shorter than its SQLite header says, but every table read was complete"
            )
        return ingest
    finally:
        con.close()
    return _read_salvaged(path, damage)


def _read_salvaged(path: Path, damage: str) -> Ingest:
    """Read what a damaged export still holds, through a rebuilt copy in a private temporary folder."""
    with tempfile.TemporaryDirectory(prefix="traceinsight-salvage-") as tmp:
        rebuilt = Path(tmp) / "salvaged.sqlite"
        try:
            report = sqlite_salvage.rebuild(path, rebuilt, SALVAGE_TABLES)
        except (sqlite_salvage.NotSQLite, OSError, sqlite3.Error) as exc:
            raise FormatError(f"{path}: damaged SQLite database ({damage}; nothing salvageable: {exc})") from None
        if KERNEL_TABLE not in report.rows:
            raise FormatError(
                f"{path}: damaged SQLite database ({damage}); {report.describe()}, and the kernel table "
                f"({KERNEL_TABLE}) is not readable"
            )
        con = connect(rebuilt)
        try:
            ingest = _read(con, path, lambda: connect(rebuilt), rebuilt)
        except sqlite3.Error as exc:
            raise FormatError(f"{path}: damaged SQLite database ({damage}; {first_line(exc)})") from None
        finally:
            con.close()
    ends = ingest.tables.get("kernels", {}).get("end_ns", [])
    last = pc.max(pa.array(ends, pa.int64())).as_py() if len(ends) else None
    where = f"the last kernel ends at {last} ns" if last is not None else "no kernel survived"
    missing = [t for t in report.lost_tables if t in _REPORT_IF_MISSING]
    lost = f"; not found (lost, or never captured): {', '.join(missing)}" if missing else ""
    ingest.warnings.insert(
        0,
        f"{path.name} is {report.describe()}: read what precedes the damage, {len(ends)} kernels ({where}){lost}",
    )
    return ingest


def connect(path: Path) -> sqlite3.Connection:
    """Open `path` read-only and immutable (sqlite writes no journal, WAL or index beside it), through the same
    quoted URI as the Arrow driver (`sqlite_arrow.uri`)."""
    try:
        con = sqlite3.connect(sqlite_arrow.uri(path), uri=True)
    except sqlite3.Error as exc:
        raise FormatError(f"{path}: cannot open as SQLite ({first_line(exc)})") from None
    con.text_factory = _decode_text
    return con


def _decode_text(raw: bytes) -> str:
    """TEXT values as str; bytes that are not UTF-8 (an NVTX string from C code) become U+FFFD, not an error."""
    return raw.decode("utf-8", "replace")


def _read(
    con: sqlite3.Connection, path: Path, opener: Callable[[], sqlite3.Connection], arrow_path: Path | None,
    slice_rows: int | None = None,
) -> Ingest:
    """Fill an Ingest from the open export `con` (`arrow_path`: the file behind it, for the Arrow driver; None
    to read through `con` only). The launches (the largest query: the runtime table, probed for launched
    correlation ids) are read on connections of their own, in a worker thread: SQLite runs without the GIL, so
    that query overlaps the kernel and memory-operation reads on a second core."""
    tables = {
        r[0]
        for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        if isinstance(r[0], str)
    }
    if KERNEL_TABLE not in tables:
        raise FormatError(
            f"{path}: Nsight Systems export without CUDA kernel activity ({KERNEL_TABLE}); "
            "capture with `nsys profile -t cuda`"
        )
    meta = _export_meta(con, tables)
    version = meta.get("EXPORT_PRODUCT_VERSION")
    ingest = Ingest(
        format=FORMAT,
        format_version=meta.get("EXPORT_SCHEMA_VERSION"),
        tool_version=f"nsys {version}" if version else None,
    )
    reader = ExportReader(con, tables, ingest, arrow_path)
    missing = {"start", "end"} - reader.columns(KERNEL_TABLE)
    if missing:
        raise FormatError(
            f"{path}: {KERNEL_TABLE} has no {' or '.join(sorted(missing))} column: not an Nsight Systems export "
            "this reader knows"
        )
    if arrow_path is not None and slice_rows is not None:
        long = {t for t in (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE, RUNTIME_TABLE)
                if t in tables and _longer_than(con, t, slice_rows)}
        if long:
            return _read_sliced(reader, opener, arrow_path, slice_rows, long)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsys-launches") as pool:
        side = pool.submit(_launches_apart, opener, tables, arrow_path)
        nsys_activity.kernels(reader)
        nsys_activity.memops(reader)
        at = len(ingest.warnings)
        nsys_nvtx.ranges(reader)
        nsys_devices.devices(reader)
        launched = side.result()  # re-raises the worker's error (a damaged page sends us to the salvage)
    # Warnings and tables in reading order: kernels, memops, launches, ranges, devices.
    ingest.warnings[at:at] = launched.warnings
    later = {n: ingest.tables.pop(n) for n in ("ranges", "devices") if n in ingest.tables}
    ingest.tables.update(launched.tables)
    nsys_graph_replays.graph_replays(reader)
    ingest.tables.update(later)
    nsys_nvtx.run_context(reader)
    if not len(ingest.tables.get("kernels", {}).get("name", [])):
        ingest.warnings.append(f"{KERNEL_TABLE} holds no kernels")
    return ingest


def _longer_than(con: sqlite3.Connection, table: str, rows: int) -> bool:
    """Whether `table` has more than `rows` rows: not where its rowids span at most `rows` (two b-tree seeks), else
    SQLite steps over `rows` of them (not the whole table). The seeks are two queries: SQLite answers a lone
    `min(rowid)` or `max(rowid)` from the b-tree's edge, but `max(rowid) - min(rowid)` by a scan of every row (1.1
    CPU-s for the 6.9M runtime rows of the 1M-kernel export)."""
    low = con.execute(f"SELECT min(rowid) FROM {table}").fetchone()
    high = con.execute(f"SELECT max(rowid) FROM {table}").fetchone()
    if low is None or high is None or low[0] is None or high[0] is None or high[0] - low[0] < rows:
        return False
    return con.execute(f"SELECT 1 FROM {table} LIMIT 1 OFFSET {int(rows)}").fetchone() is not None


def _read_sliced(
    reader: ExportReader, opener: Callable[[], sqlite3.Connection], arrow_path: Path, rows: int, long: set[str]
) -> Ingest:
    """`_read` for an export with tables too long to hold at once (`long`): those are read a slice at a time while
    the store inserts them (launches, memory operations, kernels, in that order), the rest now. Warnings keep the
    order of `_read`: the sliced tables' are put in their place once their last slice is read. Graph replays are
    built from the graph-launching calls and graph kernels kept from the slices as they pass."""
    ingest = reader.ingest
    segments: list[list[str]] = []  # warnings in reading order, the sliced tables' filled as they are read
    mark = 0

    def cut() -> None:  # what the tables read now warned of since the last cut
        nonlocal mark
        segments.append(ingest.warnings[mark:])
        mark = len(ingest.warnings)

    # The sliced tables' slices, each table on a connection of its own, read ahead from now on (one worker thread,
    # `Prefetched`), in the order the store inserts them: the reads overlap the tables read here and the inserts.
    slicers: dict[str, Callable[[ExportReader], Iterator[Columns]]] = {}
    if RUNTIME_TABLE in long:
        slicers["launches"] = lambda r: nsys_activity.launch_slices(r, rows)
    if long & {MEMCPY_TABLE, MEMSET_TABLE}:
        texts: dict[str, int] = {}
        slicers["memops"] = lambda r: (nsys_activity.memop_dictionaries(p, texts)
                                       for p in nsys_activity.memop_slices(r, rows, texts))
    if KERNEL_TABLE in long:
        slicers["kernels"] = lambda r: nsys_activity.kernel_slices(r, rows)
    warned: dict[str, list[str]] = {name: [] for name in slicers}  # filled once a table's last slice is read
    ahead = Prefetched({name: _streamed(opener, reader, arrow_path, of, warned[name]) for name, of in slicers.items()})
    streams = {name: ahead.slices(name) for name in slicers}

    def later(name: str) -> None:
        cut()
        segments.append(warned[name])

    sliced_kernels = "kernels" in slicers
    graph_warnings: list[str] = []
    try:
        if sliced_kernels:
            later("kernels")
        else:
            nsys_activity.kernels(reader)
        if "memops" in slicers:
            later("memops")
        else:
            nsys_activity.memops(reader)
        if "launches" in slicers:
            later("launches")
        else:
            nsys_activity.launches(reader)
        nsys_nvtx.ranges(reader)
        nsys_devices.devices(reader)
        records = nsys_graph_replays.graph_records(reader)
        cut()
        segments.append(graph_warnings)
        nsys_nvtx.run_context(reader)
        cut()
    except BaseException:
        ahead.close()  # the salvage reads the file again, or the error ends the read
        raise
    # Graph launches and graph kernels, kept from the slices as they pass (the launches' first: their
    # correlation ids pick the kernels).
    kept: dict[str, list[dict[str, pa.Array]]] = {"launches": [], "kernels": []}
    counted = [0]

    def keep_launches(cols: Columns) -> None:
        if (part := nsys_graph_replays.launch_subset(cols)) is not None:
            kept["launches"].append(part)

    def keep_kernels(cols: Columns) -> None:
        counted[0] += len(cols["start_ns"])
        corrs = {r.correlation_id for r in records if r.correlation_id is not None}
        for la in kept["launches"]:
            corrs.update(c for c in la["correlation_id"].to_pylist() if c is not None)
        if (part := nsys_graph_replays.kernel_subset(cols, corrs)) is not None:
            kept["kernels"].append(part)

    if "launches" not in streams:
        keep_launches(ingest.tables.get("launches", {}))
    ordered = dict(streams)
    if "launches" in ordered:
        ordered["launches"] = _tapped(ordered["launches"], keep_launches)
    if "kernels" in ordered:
        ordered["kernels"] = _tapped(ordered["kernels"], keep_kernels)

    def finish() -> Iterator[Columns]:
        part = Ingest(format=FORMAT)
        launches = _joined(kept["launches"])
        kernels = _joined(kept["kernels"]) if sliced_kernels else ingest.tables.get("kernels", {})
        nsys_graph_replays.replays(part, launches, kernels, records)
        graph_warnings.extend(part.warnings)
        if "graph_replays" in part.tables:
            yield part.tables["graph_replays"]
        if sliced_kernels and not counted[0]:
            segments.append([f"{KERNEL_TABLE} holds no kernels"])
        ingest.warnings[:] = [w for segment in segments for w in segment]

    if not sliced_kernels and not len(ingest.tables.get("kernels", {}).get("name", [])):
        segments.append([f"{KERNEL_TABLE} holds no kernels"])
    ingest.slices = {**ordered, "graph_replays": finish()}
    return ingest


def _streamed(
    opener: Callable[[], sqlite3.Connection], like: ExportReader, arrow_path: Path,
    slices_of: Callable[[ExportReader], Iterator[Columns]], warnings: list[str],
) -> Iterator[Columns]:
    """The slices of one table, read on a connection of its own opened when the first is asked for (by the
    store, after `read` returned); what its reader warned of goes to `warnings` once the last is read."""
    con = opener()
    try:
        part = Ingest(format=FORMAT)
        yield from slices_of(ExportReader(con, like.tables, part, arrow_path))
        warnings.extend(part.warnings)
    finally:
        con.close()


def _tapped(slices: Iterator[Columns], tap: Callable[[Columns], None]) -> Iterator[Columns]:
    for cols in slices:
        tap(cols)
        yield cols


def _joined(parts: list[dict[str, pa.Array]]) -> Columns:
    """Slices' columns joined into one (no columns where there is no slice)."""
    return {n: pa.concat_arrays([p[n] for p in parts]) for n in parts[0]} if parts else {}


def _launches_apart(opener: Callable[[], sqlite3.Connection], tables: set[str], arrow_path: Path | None) -> Ingest:
    """The launches table and its warnings, read on a connection of its own (for a worker thread)."""
    con = opener()
    try:
        part = Ingest(format=FORMAT)
        nsys_activity.launches(ExportReader(con, tables, part, arrow_path))
        return part
    finally:
        con.close()


def _export_meta(con: sqlite3.Connection, tables: set[str]) -> dict[str, str]:
    for table in META_TABLES:
        if table in tables:
            cols = {r[1] for r in con.execute(f"PRAGMA table_info({quote(table)})")}
            if not {"name", "value"} <= cols:
                return {}
            rows = con.execute(f"SELECT {text_sql('name')}, {text_sql('value')} FROM {table}")
            return {n: v for n, v in rows if n is not None and v is not None}
    return {}
