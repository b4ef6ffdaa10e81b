"""Reader for Nsight Systems SQLite exports (`nsys export --type sqlite`), export schemas 2.x and 3.x.

Tables appear in an export only when the capture used them, and columns come and go between schema versions,
so every query is built from the columns the file actually has. Strings (kernel, API, NVTX names) are stored
once in `StringIds` and referenced by id: rows are fetched with integer ids and resolved through one dict, so
a million launches of the same kernel share one name string. All times in an export are int64 nanoseconds.

The file is opened read-only and immutable (`mode=ro&immutable=1`): nothing, not even a journal or an index,
is ever written beside the user's export.

The large activity tables (kernels, memory operations, launches) come back as Arrow columns through the ADBC
SQLite driver (`sqlite_arrow`), with no Python object per value; string columns are dictionary-encoded (one
entry per distinct name), so a million launches of one kernel cost a million small integers. The small tables
(NVTX ranges, GPUs) are read with `sqlite3`, which is also the route for the large ones wherever the driver
cannot read the file.

Damaged input: SQLite stores any value in any column, so every value is checked: an integer out of its column's
range, a REAL, TEXT or BLOB where an integer belongs becomes None, and rows whose start/end are not integers with
end >= start are skipped and counted in a warning (Arrow compute for the large tables: `sqlite_arrow.within`,
`span_ok`; SQL for the small ones: `_int_sql`, `_text_sql`). A file SQLite refuses (truncated by a crashed job or
a full disk, a damaged page) is salvaged page by page (`sqlite_salvage`) into a temporary database, and the
warning says where the data ends.
"""

from __future__ import annotations

import re
import sqlite3
import tempfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from traceinsight.errors import FormatError
from traceinsight.ingest import sqlite_arrow, sqlite_salvage
from traceinsight.ingest.base import Columns, Ingest
from traceinsight.ingest.graphs import GraphRecord, HostCall, Work, is_graph_launch, replay_columns
from traceinsight.ingest.limits import clip_names

FORMAT = "nsys-sqlite"
KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
# Graph-level replays (`nsys --cuda-graph-trace=graph`): one row per graph launch, none of its kernels.
GRAPH_TRACE_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
NVTX_TABLE = "NVTX_EVENTS"
GPU_TABLE = "TARGET_INFO_GPU"
CUDA_DEVICE_TABLE = "TARGET_INFO_CUDA_DEVICE"
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # schema 3.x, schema 2.x

# Rowids read per query; bounds the transient JSON text held while columns are built.
FETCH_ROWS = 1 << 21

# NVTX event types (ENUM_NSYS_EVENT_TYPE), stable since the 2.x schemas that lack the enum table.
NVTX_RANGE_TYPES = {
    "NvtxPushPopRange": 59,
    "NvtxStartEndRange": 60,
    "NvtxtPushPopRange": 70,
    "NvtxtStartEndRange": 71,
}
NVTX_MARK_TYPES = {"NvtxMark": 34, "NvtxtMark": 65}
NVTX_DOMAIN_CREATE_TYPES = {"NvtxDomainCreate": 75}
NVTX_THREAD_TYPES = {"NvtxThread": 39}  # nvtxNameOsThread

# Runtime-table event classes (ENUM_NSYS_EVENT_CLASS) that repeat an API call to attach its backtrace;
# schema 2.x exports store such a second row under the call's correlation id.
BACKTRACE_CLASSES = {
    "TRACE_PROCESS_EVENT_CUDABACKTRACE": 67,
    "TRACE_PROCESS_EVENT_CUDABACKTRACE_START": 68,
    "TRACE_PROCESS_EVENT_CUDABACKTRACE_FINISH": 69,
}

# CUpti_ActivityMemcpyKind labels, as ENUM_CUDA_MEMCPY_OPER states them in exports that have it.
MEMCPY_KINDS = {
    0: "Unknown",
    1: "Host-to-Device",
    2: "Device-to-Host",
    3: "Host-to-Array",
    4: "Array-to-Host",
    5: "Array-to-Array",
    6: "Array-to-Device",
    7: "Device-to-Array",
    8: "Device-to-Device",
    9: "Host-to-Host",
    10: "Peer-to-Peer",
    11: "Unified Host-to-Device",
    12: "Unified Device-to-Host",
    13: "Unified Device-to-Device",
}

# API names carry the CUDA version that introduced them ("cudaLaunchKernel_v7000"); dropped so that names
# agree with other formats. Real name parts such as "cuGetProcAddress_v2" (one or two digits) are kept.
_API_VERSION_SUFFIX = re.compile(r"_v\d{4,}$")

# The name nsys's MPI trace gives a rank's thread (an NvtxThread event).
_MPI_RANK = re.compile(r"^MPI Rank (\d+)$")

# Bound parameters per statement (SQLite before 3.32 allows 999).
_SQL_PARAMS = 900

# GlobalId serialization: bits 24..47 hold the process id, bits 0..23 the thread id.
_PID_SQL = "(({col} >> 24) & 16777215)"
_TID_SQL = "({col} & 16777215)"

# Value ranges of the normalized columns (INTEGER is int32, BIGINT int64).
I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)

# The tables a salvage copies out of a damaged export.
SALVAGE_TABLES = (
    "StringIds",
    KERNEL_TABLE,
    RUNTIME_TABLE,
    MEMCPY_TABLE,
    MEMSET_TABLE,
    GRAPH_TRACE_TABLE,
    NVTX_TABLE,
    GPU_TABLE,
    CUDA_DEVICE_TABLE,
    *META_TABLES,
    "ENUM_NSYS_EVENT_TYPE",
    "ENUM_NSYS_EVENT_CLASS",
    "ENUM_CUDA_MEMCPY_OPER",
)
# Tables whose absence from a salvaged export the warning names (optional ones like MEMSET are left out).
_REPORT_IF_MISSING = ("StringIds", RUNTIME_TABLE, NVTX_TABLE, GPU_TABLE)
# SQLite result codes of a file that is not (or no longer) a whole database.
_DAMAGE_CODES = ("SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_IOERR")


def _is_damage(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused because the file is damaged (salvageable), not because of a query."""
    return str(getattr(exc, "sqlite_errorname", "")).startswith(_DAMAGE_CODES)


def _q(name: str) -> str:
    """A column name as a quoted SQL identifier (`end` is a keyword)."""
    return '"' + name.replace('"', '""') + '"'


def _int_sql(expr: str, bounds: tuple[int, int] = I64) -> str:
    """`expr` when it is an integer within `bounds`, else NULL (SQLite keeps text, reals and blobs in INTEGER
    columns as they were written)."""
    if expr == "NULL":
        return expr
    lo, hi = bounds
    if (lo, hi) == I64:  # every SQLite integer is an int64
        return sqlite_arrow.as_int_sql(expr)
    return f"(CASE WHEN typeof({expr}) = 'integer' AND ({expr}) BETWEEN {lo} AND {hi} THEN ({expr}) END)"


def _text_sql(expr: str) -> str:
    """`expr` as TEXT when it is text (or a blob, read as text), else NULL."""
    if expr == "NULL":
        return expr
    return f"(CASE typeof({expr}) WHEN 'text' THEN {expr} WHEN 'blob' THEN CAST({expr} AS TEXT) END)"


def _valid_span(start: str = '"start"', end: str = '"end"') -> str:
    """Rows whose start and end are integers with end >= start and a duration that fits int64 (an overflowing
    SQLite subtraction gives a REAL beyond the bound)."""
    return (
        f"typeof({start}) = 'integer' AND typeof({end}) = 'integer' AND {end} >= {start} "
        f"AND ({end} - {start}) <= {I64[1]}"
    )


def _arrow(values: list[Any] | pa.Array) -> pa.Array:
    """A column as an Arrow array (this reader's are; a list only in a hand-built Ingest)."""
    return values if isinstance(values, pa.Array) else pa.array(values)


def _global_ids(ids: pa.Array) -> dict[str, pa.Array]:
    """process_id and thread_id of serialized GlobalIds (null stays null)."""
    return {
        "process_id": pc.bit_wise_and(pc.shift_right(ids, 24), 16777215),
        "thread_id": pc.bit_wise_and(ids, 16777215),
    }


def read(path: Path) -> Ingest:
    """Read an Nsight Systems SQLite export into the normalized tables (kernels, launches, ranges, memops,
    devices). A truncated or damaged file is salvaged: the rows still readable are used and the first warning
    says where the data ends. Raises FormatError (one line, starting with the path) for files with nothing to
    salvage and exports without CUDA kernel activity."""
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
        ingest = _read(con, path, opened, None if truncated else path)
    except sqlite3.Error as exc:
        if not _is_damage(exc):
            raise FormatError(f"{path}: damaged SQLite database ({_first_line(exc)})") from None
        damage = _first_line(exc)
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
            raise FormatError(f"{path}: damaged SQLite database ({damage}; {_first_line(exc)})") from None
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
        raise FormatError(f"{path}: cannot open as SQLite ({_first_line(exc)})") from None
    con.text_factory = _decode_text
    return con


def _decode_text(raw: bytes) -> str:
    """TEXT values as str; bytes that are not UTF-8 (an NVTX string from C code) become U+FFFD, not an error."""
    return raw.decode("utf-8", "replace")


def _read(
    con: sqlite3.Connection, path: Path, opener: Callable[[], sqlite3.Connection], arrow_path: Path | None
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
    reader = _Reader(con, tables, ingest, arrow_path)
    missing = {"start", "end"} - reader.columns(KERNEL_TABLE)
    if missing:
        raise FormatError(
            f"{path}: {KERNEL_TABLE} has no {' or '.join(sorted(missing))} column: not an Nsight Systems export "
            "this reader knows"
        )
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsys-launches") as pool:
        side = pool.submit(_launches_apart, opener, tables, arrow_path)
        reader.kernels()
        reader.memops()
        at = len(ingest.warnings)
        reader.ranges()
        reader.devices()
        launched = side.result()  # re-raises the worker's error (a damaged page sends us to the salvage)
    # Warnings and tables in reading order: kernels, memops, launches, ranges, devices.
    ingest.warnings[at:at] = launched.warnings
    later = {n: ingest.tables.pop(n) for n in ("ranges", "devices") if n in ingest.tables}
    ingest.tables.update(launched.tables)
    reader.graph_replays()
    ingest.tables.update(later)
    reader.run_context()
    if not len(ingest.tables.get("kernels", {}).get("name", [])):
        ingest.warnings.append(f"{KERNEL_TABLE} holds no kernels")
    return ingest


def _launches_apart(opener: Callable[[], sqlite3.Connection], tables: set[str], arrow_path: Path | None) -> Ingest:
    """The launches table and its warnings, read on a connection of its own (for a worker thread)."""
    con = opener()
    try:
        part = Ingest(format=FORMAT)
        _Reader(con, tables, part, arrow_path).launches()
        return part
    finally:
        con.close()


def _export_meta(con: sqlite3.Connection, tables: set[str]) -> dict[str, str]:
    for table in META_TABLES:
        if table in tables:
            cols = {r[1] for r in con.execute(f"PRAGMA table_info({_q(table)})")}
            if not {"name", "value"} <= cols:
                return {}
            rows = con.execute(f"SELECT {_text_sql('name')}, {_text_sql('value')} FROM {table}")
            return {n: v for n, v in rows if n is not None and v is not None}
    return {}


def _id_list(ids: set[int]) -> str:
    return ", ".join(str(int(i)) for i in sorted(ids)) or "NULL"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class _Reader:
    """Queries one open export; each method fills one normalized table of `ingest`."""

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

    # ------------------------------------------------------------------ helpers
    def columns(self, table: str) -> set[str]:
        if table not in self._cols:
            self._cols[table] = {r[1] for r in self.con.execute(f"PRAGMA table_info({_q(table)})")}
        return self._cols[table]

    def col(self, table: str, name: str) -> str:
        """`name` (quoted) when `table` has that column, else the SQL literal NULL."""
        return _q(name) if name in self.columns(table) else "NULL"

    def int_col(self, table: str, name: str, bounds: tuple[int, int] = I64) -> str:
        """The integer value of column `name` within `bounds`, else NULL (also when the column is absent)."""
        return _int_sql(self.col(table, name), bounds)

    def has_span(self, table: str) -> bool:
        return {"start", "end"} <= self.columns(table)

    def skipped_rows(self, table: str, where: str, label: str) -> None:
        """Warn about the rows of `table` matching `where` whose start/end are unusable."""
        n = self.con.execute(f"SELECT count(*) FROM {table} WHERE ({where}) AND NOT ({_valid_span()})").fetchone()[0]
        if n:
            self.ingest.warnings.append(f"{n} {label} skipped: start/end not integers, or end before start ({table})")

    def fetch(self, table: str, exprs: list[str], names: list[str], where: str = "") -> Columns:
        """Evaluate `exprs` over the rows of `table` matching `where`, in rowid order; return one list per name.

        Rows are read in slices of FETCH_ROWS (a rowid seek each, so sparse rowids cost nothing). Each slice
        comes back as one JSON array per column (`json_group_array`, parsed with orjson), several times faster
        than Python's row-by-row cursor; where SQLite lacks JSON support, or a slice's text is not valid UTF-8,
        the slice is fetched as rows instead."""
        out: Columns = {n: [] for n in names}
        aliases = [f"c{i}" for i in range(len(exprs))]
        cond = f"({where})" if where else "1"
        sub = (
            f"SELECT rowid AS _rid, {', '.join(f'{e} AS {a}' for e, a in zip(exprs, aliases, strict=True))} "
            f"FROM {table} WHERE {cond} AND rowid > ? ORDER BY rowid LIMIT {FETCH_ROWS}"
        )
        after = -(2**63)
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
                    if _is_damage(exc):
                        raise
                    self.use_json = False
                except orjson.JSONDecodeError:  # text that is not UTF-8 in this slice
                    parts = None
            if parts is None:
                rows = self.con.execute(sub, [after]).fetchall()
                count, last = len(rows), (rows[-1][0] if rows else None)
                parts = list(zip(*rows, strict=True))[1:] if rows else [() for _ in exprs]
            for name, values in zip(names, parts, strict=True):
                if out[name] or not isinstance(values, list):
                    out[name].extend(values)
                else:  # the first slice's list is kept, not copied
                    out[name] = values
            if count < FETCH_ROWS or last is None:
                return out
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
        keep = sqlite_arrow.span_ok(cols["start_ns"], cols["end_ns"])
        if keep is not None:
            skipped = len(keep) - pc.sum(keep).as_py()
            self.ingest.warnings.append(
                f"{skipped} {label} skipped: start/end not integers, or end before start ({table})"
            )
            cols = {n: v.filter(keep) for n, v in cols.items()}
        for name, limits in bounds.items():
            if limits is not None:
                cols[name] = sqlite_arrow.within(cols[name], limits)
        return cols

    def int_arrays(self, table: str, exprs: list[str], names: list[str], where: str = "") -> dict[str, pa.Array]:
        """`exprs` over the rows of `table` matching `where`, in rowid order, as int64 arrays (values that are not
        integers read as null): through the Arrow driver, else through `sqlite3`."""
        if self.arrow_path is not None:
            cond = f"WHERE {where}" if where else ""
            try:
                return sqlite_arrow.int_columns(self.arrow_path, exprs, names, f"FROM {table} {cond} ORDER BY rowid")
            except sqlite_arrow.Unreadable:
                self.arrow_path = None  # the same file again would fail the same way
        lists = self.fetch(table, [_int_sql(e) for e in exprs], names, where)
        return {n: pa.array(v, pa.int64()) for n, v in lists.items()}

    def strings(self, ids: Iterable[Any]) -> dict[int, str]:
        """StringIds values of `ids` (None, unknown ids and values that are not text are left out)."""
        wanted = sorted(i for i in set(ids) if isinstance(i, int))
        if not wanted or "StringIds" not in self.tables or not {"id", "value"} <= self.columns("StringIds"):
            return {}
        out: dict[int, str] = {}
        value = _text_sql('"value"')
        for k in range(0, len(wanted), _SQL_PARAMS):
            chunk = wanted[k : k + _SQL_PARAMS]
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
        self._warn_clipped(n, what)
        return out

    def clipped_codes(self, names: pa.DictionaryArray, what: str) -> pa.DictionaryArray:
        """`clipped` for a dictionary-encoded column: the dictionary is cut, the warning counts rows."""
        labels = names.dictionary.to_pylist()
        out, n = clip_names(labels)
        if not n:
            return names
        cut = [i for i, (a, b) in enumerate(zip(labels, out, strict=True)) if a != b]
        self._warn_clipped(sqlite_arrow.count_codes(names.indices, cut), what)
        return sqlite_arrow.dictionary(names.indices, out)

    def _warn_clipped(self, n: int, what: str) -> None:
        if n:
            self.ingest.warnings.append(
                f"{n} {what} names longer than the limit were cut (TRACEINSIGHT_MAX_NAME_CHARS)"
            )

    # ------------------------------------------------------------------ tables
    def kernels(self) -> None:
        t = KERNEL_TABLE
        spec: dict[str, tuple[str, tuple[int, int] | None]] = {
            "device_id": ("deviceId", I32),
            "stream_id": ("streamId", I64),
            "grid_x": ("gridX", I32),
            "grid_y": ("gridY", I32),
            "grid_z": ("gridZ", I32),
            "block_x": ("blockX", I32),
            "block_y": ("blockY", I32),
            "block_z": ("blockZ", I32),
            "registers_per_thread": ("registersPerThread", I32),
            "static_smem_bytes": ("staticSharedMemory", I32),
            "dynamic_smem_bytes": ("dynamicSharedMemory", I32),
            "correlation_id": ("correlationId", I64),
            "graph_node_id": ("graphNodeId", I64),
            "graph_id": ("graphId", I64),  # in exports that have it (2025.3's lacks it)
            "_pid": ("globalPid", I64),
            "_demangled": ("demangledName", I64),
            "_short": ("shortName", I64),
            "_mangled": ("mangledName", I64),
        }
        got = self.fetch_checked(t, spec, "kernels")
        static, dynamic = got["static_smem_bytes"], got["dynamic_smem_bytes"]
        if {"staticSharedMemory", "dynamicSharedMemory"} <= self.columns(t):
            smem = sqlite_arrow.within(pc.add(static, dynamic), I32)  # null where either is
        else:
            smem = pa.nulls(len(static), pa.int64())
        cols: Columns = {n: got[n] for n in ["start_ns", "end_ns", *list(spec)[:11]]}
        cols["smem_bytes"] = smem
        cols["correlation_id"] = got["correlation_id"]
        cols["graph_node_id"] = got["graph_node_id"]
        graph = got["graph_id"]  # CUPTI writes 0 for a kernel not launched from a graph
        cols["graph_id"] = pc.if_else(pc.equal(graph, 0), pa.scalar(None, pa.int64()), graph) if graph.null_count < len(
            graph) else graph
        cols["process_id"] = _global_ids(got["_pid"])["process_id"]
        demangled, short, mangled = got["_demangled"], got["_short"], got["_mangled"]
        names = self.strings(pc.unique(pa.concat_arrays([demangled, short, mangled])).to_pylist())
        # The demangled name, else the short one, else the mangled one, else "": codes into one label list,
        # computed once per distinct id.
        labels = ["", *sorted({v for v in names.values() if v})]
        index = {v: i for i, v in enumerate(labels)}

        def codes(ids: pa.Array) -> pa.Array:
            distinct = pc.unique(ids)
            per = [index.get(names.get(i, "")) if i is not None else None for i in distinct.to_pylist()]
            return pc.take(pa.array(per, pa.int32()), pc.index_in(ids, value_set=distinct))

        chosen = pc.coalesce(codes(demangled), codes(short), codes(mangled), pa.scalar(0, pa.int32()))
        cols["name"] = self.clipped_codes(sqlite_arrow.dictionary(chosen, labels), "kernel")
        cols["mangled_name"] = self.clipped_codes(sqlite_arrow.lookup(mangled, names), "mangled kernel")
        unnamed = sqlite_arrow.count_codes(chosen, [0])
        if unnamed:
            self.ingest.warnings.append(f"{unnamed} kernels without a name in StringIds")
        self.ingest.tables["kernels"] = cols

    def memops(self) -> None:
        names = ["device_id", "stream_id", "start_ns", "end_ns", "bytes", "correlation_id"]
        parts: dict[str, list[pa.Array]] = {n: [] for n in ["kind", "name", *names]}
        texts: dict[str, int] = {}  # operation name -> code of the name column
        labels = dict(MEMCPY_KINDS)
        enum = "ENUM_CUDA_MEMCPY_OPER"
        if enum in self.tables and {"id", "label"} <= self.columns(enum):
            rows = self.con.execute(f"SELECT {_int_sql(_q('id'))}, {_text_sql(_q('label'))} FROM {enum}")
            labels.update((i, lab) for i, lab in rows if i is not None and lab is not None)
        for table, kind in ((MEMCPY_TABLE, "memcpy"), (MEMSET_TABLE, "memset")):
            if table not in self.tables:
                continue
            if not self.has_span(table):
                self.ingest.warnings.append(f"{table} has no start/end columns: {kind} operations not read")
                continue
            spec: dict[str, tuple[str, tuple[int, int] | None]] = {
                "device_id": ("deviceId", I32),
                "stream_id": ("streamId", I64),
                "bytes": ("bytes", I64),
                "correlation_id": ("correlationId", I64),
                "_copy": ("copyKind" if kind == "memcpy" else "", I64),  # "": no such column, all None
            }
            cols = self.fetch_checked(table, spec, f"{kind} operations")
            for n in names:
                parts[n].append(cols[n])
            copy = cols["_copy"]
            parts["kind"].append(pa.repeat(pa.scalar(0 if kind == "memcpy" else 1, pa.int32()), len(copy)))
            if kind == "memset":
                code = texts.setdefault("[CUDA memset]", len(texts))
                parts["name"].append(pa.repeat(pa.scalar(code, pa.int32()), len(copy)))
            else:
                distinct = pc.unique(copy)
                per = [
                    texts.setdefault(f"[CUDA memcpy {labels.get(k, f'kind {k}')}]", len(texts))
                    for k in distinct.to_pylist()
                ]
                parts["name"].append(pc.take(pa.array(per, pa.int32()), pc.index_in(copy, value_set=distinct)))
        if sum(map(len, parts["kind"])):
            out: Columns = {n: pa.concat_arrays(v) for n, v in parts.items()}
            out["kind"] = sqlite_arrow.dictionary(out["kind"], ["memcpy", "memset"])
            out["name"] = sqlite_arrow.dictionary(out["name"], list(texts))
            self.ingest.tables["memops"] = out

    def launches(self) -> None:
        """Runtime/driver API calls whose correlation id launched a kernel, memcpy or memset."""
        t = RUNTIME_TABLE
        if t not in self.tables or "correlationId" not in self.columns(t):
            self.ingest.warnings.append(f"no {t} table: kernels cannot be traced to the calls that launched them")
            return
        if not self.has_span(t):
            self.ingest.warnings.append(f"{t} has no start/end columns: launches not read")
            return
        gpu_work = [
            x
            for x in (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE, GRAPH_TRACE_TABLE)
            if x in self.tables and "correlationId" in self.columns(x)
        ]
        if not gpu_work:
            return
        launched = " UNION ALL ".join(
            f"SELECT correlationId FROM {x} WHERE typeof(correlationId) = 'integer'" for x in gpu_work
        )
        spec: dict[str, tuple[str, tuple[int, int] | None]] = {
            "correlation_id": ("correlationId", None),  # an integer: the query keeps no other
            "_name": ("nameId", I64),
            "_tid": ("globalTid", I64),
        }
        # SQLite builds the set of launched ids once per statement (an ephemeral index), then probes it per row:
        # cheaper than fetching every runtime row and filtering them here (measured: 2.3 s against 2.9 s on the
        # 1M-kernel benchmark export, 6.9M runtime rows of which 2.6M launch GPU work).
        where = f"typeof(correlationId) = 'integer' AND correlationId IN ({launched})"
        if "eventClass" in self.columns(t):
            # Backtrace rows are left out, but those with unusable start/end still come back, to be counted in
            # the skipped-rows warning (fetch_checked drops every such row).
            classes = _id_list(self.enum_ids("ENUM_NSYS_EVENT_CLASS", BACKTRACE_CLASSES))
            where += f" AND (eventClass NOT IN ({classes}) OR NOT ({_valid_span()}))"
        got = self.fetch_checked(t, spec, "launch calls", where)
        cols: Columns = {
            "correlation_id": got["correlation_id"],
            "start_ns": got["start_ns"],
            "end_ns": got["end_ns"],
            **_global_ids(got["_tid"]),
        }
        name_ids = got["_name"]
        distinct = pc.unique(name_ids).to_pylist()
        names = {i: _API_VERSION_SUFFIX.sub("", s) for i, s in self.strings(distinct).items()}
        cols["name"] = self.clipped_codes(sqlite_arrow.lookup(name_ids, names, missing=""), "API call")
        self.ingest.tables["launches"] = cols

    def graph_records(self) -> list[GraphRecord]:
        """The graph-level replay records (CUPTI_ACTIVITY_KIND_GRAPH_TRACE), when the capture made them."""
        t = GRAPH_TRACE_TABLE
        if t not in self.tables:
            return []
        if not self.has_span(t):
            self.ingest.warnings.append(f"{t} has no start/end columns: graph-level replays not read")
            return []
        spec: dict[str, tuple[str, tuple[int, int] | None]] = {
            "device_id": ("deviceId", I32),
            "stream_id": ("streamId", I64),
            "correlation_id": ("correlationId", I64),
            "graph_id": ("graphId", I64),
            "graph_exec_id": ("graphExecId", I64),
            "_pid": ("globalPid", I64),
        }
        got = self.fetch_checked(t, spec, "graph replays")
        got["process_id"] = _global_ids(got.pop("_pid"))["process_id"]
        rows = {n: v.to_pylist() for n, v in got.items()}
        out = []
        for i in range(len(rows["start_ns"])):
            start, end = rows["start_ns"][i], rows["end_ns"][i]
            dev = rows["device_id"][i]
            out.append(GraphRecord(
                correlation_id=rows["correlation_id"][i],
                process_id=rows["process_id"][i],
                # CUPTI writes 0 for both when it could not time the graph; a device of INT_MAX: started on the host.
                start_ns=None if start == end == 0 else start,
                end_ns=None if start == end == 0 else end,
                device_id=None if dev == I32[1] else dev,
                stream_id=rows["stream_id"][i],
                graph_id=rows["graph_id"][i],
                graph_exec_id=rows["graph_exec_id"][i],
            ))
        return out

    def graph_replays(self) -> None:
        """graph_replays from the graph-launching host calls (launches), the kernels they replayed (their
        correlation id; graphNodeId set with --cuda-graph-trace=node) and the graph-level records (--cuda-graph-trace
        =graph, whose kernels are not in the export: hidden replays). Aggregated with Arrow over the graph kernels
        only; nothing to do in a capture without graphs."""
        records = self.graph_records()
        calls: dict[tuple[int | None, int], HostCall] = {}
        la = {n: _arrow(v) for n, v in self.ingest.tables.get("launches", {}).items()}
        if la and len(la["correlation_id"]):
            names = la["name"]
            if isinstance(names, pa.DictionaryArray):  # as `launches` reads them: one entry per distinct name
                codes = [i for i, n in enumerate(names.dictionary.to_pylist()) if is_graph_launch(n)]
                mask = pc.is_in(names.indices, value_set=pa.array(codes, names.indices.type)) if codes else None
                la["name"] = names.cast(pa.string()) if codes else names
            else:
                found = [n for n in pc.unique(names).to_pylist() if is_graph_launch(n)]
                mask = pc.is_in(names, value_set=pa.array(found, names.type)) if found else None
            if mask is not None:
                picked = {c: la[c].filter(mask).to_pylist()
                          for c in ("correlation_id", "name", "start_ns", "end_ns", "process_id", "thread_id")}
                for corr, name, start, end, pid, tid in zip(*picked.values(), strict=True):
                    calls.setdefault((pid, corr), HostCall(name, start, end, pid, tid))
        k = {n: _arrow(v) for n, v in self.ingest.tables.get("kernels", {}).items()}
        work: dict[tuple[int | None, int], Work] = {}
        graph_corrs = {c for _, c in calls} | {r.correlation_id for r in records if r.correlation_id is not None}
        if k and len(k["correlation_id"]) and (graph_corrs or k["graph_node_id"].null_count < len(k["graph_node_id"])):
            mask = pc.is_valid(k["graph_node_id"])
            if graph_corrs:
                mask = pc.or_(mask, pc.is_in(k["correlation_id"], value_set=pa.array(sorted(graph_corrs), pa.int64())))
            picked = {c: k[c].filter(mask).to_pylist()
                      for c in ("process_id", "correlation_id", "start_ns", "end_ns", "device_id", "stream_id",
                                "graph_id")}
            for pid, corr, start, end, dev, stream, graph in zip(*picked.values(), strict=True):
                if corr is None:
                    continue
                w = work.get((pid, corr))
                if w is None:
                    w = work[(pid, corr)] = Work()
                w.add(start, end, dev, stream, True)
                if graph is not None and graph != 0:
                    w.graph_id = graph
        cols = replay_columns(calls, work, records)
        if cols is not None:
            hidden = sum(cols["hidden"])
            if hidden:
                self.ingest.warnings.append(
                    f"{hidden} CUDA graph replays recorded as whole graphs ({GRAPH_TRACE_TABLE}): the kernels inside "
                    "them are not in the export; recapture with `nsys profile --cuda-graph-trace=node` to see them")
            self.ingest.tables["graph_replays"] = cols

    def run_context(self) -> None:
        """The rank of an MPI run: nsys's MPI trace names the rank's thread 'MPI Rank N' (an NvtxThread event). The
        only run context an export states; NCCL's NVTX ranges carry no rank in their text. Else all stay None."""
        t = NVTX_TABLE
        if t not in self.tables or "eventType" not in self.columns(t):
            return
        types = _id_list(self.enum_ids("ENUM_NSYS_EVENT_TYPE", NVTX_THREAD_TYPES))
        text, text_id = _text_sql(self.col(t, "text")), self.int_col(t, "textId")
        rows = self.con.execute(f"SELECT DISTINCT {text}, {text_id} FROM {t} WHERE eventType IN ({types})").fetchall()
        strings = self.strings(r[1] for r in rows)
        names = {x if x is not None else strings.get(i) for x, i in rows}
        ranks = {int(m[1]) for n in names if n is not None and (m := _MPI_RANK.match(n))}
        if len(ranks) == 1:
            self.ingest.rank = ranks.pop()
            self.ingest.dist_backend = "mpi"

    def ranges(self) -> None:
        """NVTX push/pop and start/end ranges, on the CPU thread that opened them."""
        t = NVTX_TABLE
        if t not in self.tables:
            return
        if not self.has_span(t) or "eventType" not in self.columns(t):
            self.ingest.warnings.append(f"{t} has no start, end or eventType column: NVTX ranges not read")
            return
        c = self.col
        range_types = _id_list(self.enum_ids("ENUM_NSYS_EVENT_TYPE", NVTX_RANGE_TYPES))
        mark_types = _id_list(self.enum_ids("ENUM_NSYS_EVENT_TYPE", NVTX_MARK_TYPES))
        domain_types = _id_list(self.enum_ids("ENUM_NSYS_EVENT_TYPE", NVTX_DOMAIN_CREATE_TYPES))
        text, text_id = _text_sql(c(t, "text")), self.int_col(t, "textId")
        domain_id, tid = self.int_col(t, "domainId"), self.int_col(t, "globalTid")
        pid_sql, tid_sql = _PID_SQL.format(col=tid), _TID_SQL.format(col=tid)
        marks, open_ranges = self.con.execute(
            f"SELECT coalesce(sum(eventType IN ({mark_types})), 0), "
            f'coalesce(sum(eventType IN ({range_types}) AND "end" IS NULL), 0) FROM {t}'
        ).fetchone()
        if marks:
            self.ingest.warnings.append(f"{marks} NVTX marks skipped (instants, not ranges)")
        if open_ranges:
            self.ingest.warnings.append(f"{open_ranges} NVTX ranges without an end skipped (open at capture stop)")
        self.skipped_rows(t, f'eventType IN ({range_types}) AND "end" IS NOT NULL', "NVTX ranges")
        cols = self.fetch(
            t,
            ['"start"', '"end"', text, text_id, pid_sql, tid_sql, domain_id],
            ["start_ns", "end_ns", "_text", "_text_id", "process_id", "thread_id", "_domain"],
            f"eventType IN ({range_types}) AND {_valid_span()}",
        )
        texts, text_ids, dids = cols.pop("_text"), cols.pop("_text_id"), cols.pop("_domain")
        created = self.con.execute(
            f"SELECT {pid_sql}, {domain_id}, {text}, {text_id} FROM {t} "
            f"WHERE eventType IN ({domain_types}) AND {domain_id} IS NOT NULL"
        ).fetchall()
        strings = self.strings([*text_ids, *(r[3] for r in created)])
        # Domain ids are handed out per process; (None, id) is the fallback when the process is unknown.
        domains: dict[tuple[int | None, int], str] = {}
        for pid, did, txt, txt_id in created:
            name = txt if txt is not None else strings.get(txt_id)
            if name is not None:
                domains[(pid, did)] = name
                domains.setdefault((None, did), name)
        cols["name"] = self.clipped(
            [x if x is not None else strings.get(i, "") for x, i in zip(texts, text_ids, strict=True)], "NVTX range"
        )
        cols["domain"] = self.clipped(
            [
                None if not d else domains.get((p, d)) or domains.get((None, d)) or f"domain {d}"
                for p, d in zip(cols["process_id"], dids, strict=True)
            ],
            "NVTX domain",
        )
        n = len(cols["name"])
        cols["kind"] = ["nvtx"] * n
        cols["side"] = ["cpu"] * n
        cols["device_id"] = [None] * n
        cols["stream_id"] = [None] * n
        self.ingest.tables["ranges"] = cols

    def devices(self) -> None:
        """GPU properties from TARGET_INFO_GPU, keyed by the CUDA device ordinal the activity tables use."""
        if GPU_TABLE not in self.tables:
            self.ingest.warnings.append(f"no {GPU_TABLE} table: GPU properties unknown")
            return
        t = GPU_TABLE

        # Capacities must be positive: a zero or negative SM count or warp size is damage, read as unknown.
        def i32(n: str) -> str:
            return self.int_col(t, n, I32)

        def i64(n: str) -> str:
            return self.int_col(t, n)

        def pos32(n: str) -> str:
            return self.int_col(t, n, (1, I32[1]))

        def pos64(n: str) -> str:
            return self.int_col(t, n, (1, I64[1]))

        fields = {
            "_gpu_id": i64("id"),
            "_cu_device": i32("cuDevice"),
            "name": _text_sql(self.col(t, "name")),
            "num_sms": pos32("smCount"),
            "compute_major": self.int_col(t, "computeMajor", (0, I32[1])),
            "compute_minor": self.int_col(t, "computeMinor", (0, I32[1])),
            "regs_per_sm": pos32("maxRegistersPerSm"),
            "regs_per_block": pos32("maxRegistersPerBlock"),
            "smem_per_sm_bytes": pos64("maxShmemPerSm"),
            "smem_per_block_optin_bytes": pos64("maxShmemPerBlockOptin"),
            "max_threads_per_block": pos32("maxThreadsPerBlock"),
            "max_blocks_per_sm": pos32("maxBlocksPerSm"),
            "max_warps_per_sm": pos32("maxWarpsPerSm"),
            "warp_size": pos32("threadsPerWarp"),
            "total_mem_bytes": pos64("totalMemory"),
            "mem_bandwidth_bytes_per_s": pos64("memoryBandwidth"),
            "clock_hz": pos64("clockRate"),
            "l2_bytes": pos64("l2CacheSize"),
        }
        rows = self.con.execute(f"SELECT {', '.join(fields.values())} FROM {t} ORDER BY {fields['_gpu_id']}")
        gpus = [dict(zip(fields, r, strict=True)) for r in rows]
        # TARGET_INFO_CUDA_DEVICE maps a GPU (TARGET_INFO_GPU.id) to the ordinal each traced process saw it as;
        # where it maps any GPU, GPUs it leaves out were not used. Older exports lack it: then cuDevice, else id.
        ordinals: dict[int, list[int]] = {}
        if CUDA_DEVICE_TABLE in self.tables and {"gpuId", "cudaId"} <= self.columns(CUDA_DEVICE_TABLE):
            gpu_id, cuda_id = _int_sql('"gpuId"'), _int_sql('"cudaId"', I32)
            for g, cuda in self.con.execute(
                f"SELECT DISTINCT {gpu_id}, {cuda_id} FROM {CUDA_DEVICE_TABLE} "
                f"WHERE {gpu_id} IS NOT NULL AND {cuda_id} IS NOT NULL ORDER BY 1, 2"
            ):
                ordinals.setdefault(g, []).append(cuda)
        names = ["device_id", *[f for f in fields if not f.startswith("_")], "max_threads_per_sm"]
        cols: Columns = {n: [] for n in names}
        seen: dict[int, str] = {}
        for gpu in gpus:
            ids: Sequence[int | None]
            if ordinals:
                ids = ordinals.get(gpu["_gpu_id"], [])
            else:
                own = gpu["_cu_device"] if gpu["_cu_device"] is not None else gpu["_gpu_id"]
                ids = [own if own is not None and I32[0] <= own <= I32[1] else None]
            for device_id in ids:
                if device_id is None:
                    continue
                if device_id in seen:
                    if seen[device_id] != gpu["name"]:
                        self.ingest.warnings.append(
                            f"two GPUs ({seen[device_id]}, {gpu['name']}) as CUDA device {device_id} "
                            "(in different processes); kept the first"
                        )
                    continue
                seen[device_id] = gpu["name"]
                warps, warp = gpu["max_warps_per_sm"], gpu["warp_size"]
                threads = warps * warp if warps is not None and warp is not None else None
                row = {
                    **gpu,
                    "device_id": device_id,
                    "max_threads_per_sm": threads if threads is not None and I32[0] <= threads <= I32[1] else None,
                }
                for n in names:
                    cols[n].append(row[n])
        self.ingest.tables["devices"] = cols
