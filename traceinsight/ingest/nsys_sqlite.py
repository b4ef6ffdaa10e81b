"""Reader for Nsight Systems SQLite exports (`nsys export --type sqlite`), export schemas 2.x and 3.x.

Tables appear in an export only when the capture used them, and columns come and go between schema versions,
so every query is built from the columns the file actually has. Strings (kernel, API, NVTX names) are stored
once in `StringIds` and referenced by id: rows are fetched with integer ids and resolved through one dict, so
a million launches of the same kernel share one name string. All times in an export are int64 nanoseconds.

The file is opened read-only and immutable (`mode=ro&immutable=1`): nothing, not even a journal or an index,
is ever written beside the user's export.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from traceinsight.errors import FormatError
from traceinsight.ingest.base import Columns, Ingest

FORMAT = "nsys-sqlite"
KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
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

# Bound parameters per statement (SQLite before 3.32 allows 999).
_SQL_PARAMS = 900

# GlobalId serialization: bits 24..47 hold the process id, bits 0..23 the thread id.
_PID_SQL = "(({col} >> 24) & 16777215)"
_TID_SQL = "({col} & 16777215)"


def read(path: Path) -> Ingest:
    """Read an Nsight Systems SQLite export into the normalized tables (kernels, launches, ranges, memops,
    devices). Raises FormatError (one line, starting with the path) for damaged files and exports without
    CUDA kernel activity."""
    con = connect(path)
    try:
        return _read(con, path)
    except sqlite3.Error as exc:
        raise FormatError(f"{path}: damaged SQLite database ({_first_line(exc)})") from None
    finally:
        con.close()


def connect(path: Path) -> sqlite3.Connection:
    """Open `path` read-only and immutable (sqlite writes no journal, WAL or index beside it); the path is
    percent-quoted so that '#', '?' or '%' in it cannot end or alter the URI."""
    uri = f"file:{quote(str(Path(path).absolute()))}?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise FormatError(f"{path}: cannot open as SQLite ({_first_line(exc)})") from None
    con.text_factory = _decode_text
    return con


def _decode_text(raw: bytes) -> str:
    """TEXT values as str; bytes that are not UTF-8 (an NVTX string from C code) become U+FFFD, not an error."""
    return raw.decode("utf-8", "replace")


def _read(con: sqlite3.Connection, path: Path) -> Ingest:
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
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
    reader = _Reader(con, tables, ingest)
    reader.kernels()
    reader.memops()
    reader.launches()
    reader.ranges()
    reader.devices()
    if not ingest.tables.get("kernels", {}).get("name"):
        ingest.warnings.append(f"{KERNEL_TABLE} holds no kernels")
    return ingest


def _export_meta(con: sqlite3.Connection, tables: set[str]) -> dict[str, str]:
    for table in META_TABLES:
        if table in tables:
            return {str(n): str(v) for n, v in con.execute(f"SELECT name, value FROM {table}") if v is not None}
    return {}


def _id_list(ids: set[int]) -> str:
    return ", ".join(str(i) for i in sorted(ids))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class _Reader:
    """Queries one open export; each method fills one normalized table of `ingest`."""

    def __init__(self, con: sqlite3.Connection, tables: set[str], ingest: Ingest, use_json: bool = True) -> None:
        self.con = con
        self.tables = tables
        self.ingest = ingest
        self.use_json = use_json
        self._cols: dict[str, set[str]] = {}

    # ------------------------------------------------------------------ helpers
    def columns(self, table: str) -> set[str]:
        if table not in self._cols:
            self._cols[table] = {r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')}
        return self._cols[table]

    def col(self, table: str, name: str) -> str:
        """`name` when `table` has that column, else the SQL literal NULL."""
        return name if name in self.columns(table) else "NULL"

    def fetch(self, table: str, exprs: list[str], names: list[str], where: str = "") -> Columns:
        """Evaluate `exprs` over the rows of `table` matching `where`; return one list per name.

        Rows are read in rowid slices of FETCH_ROWS. Each slice comes back as one JSON array per column
        (`json_group_array`, parsed with orjson), several times faster than Python's row-by-row cursor; where
        SQLite lacks JSON support the slice is fetched as rows instead."""
        out: Columns = {n: [] for n in names}
        lo, hi = self.con.execute(f"SELECT min(rowid), max(rowid) FROM {table}").fetchone()
        if lo is None:
            return out
        for first in range(lo, hi + 1, FETCH_ROWS):
            cond = f"rowid BETWEEN {first} AND {first + FETCH_ROWS - 1}" + (f" AND ({where})" if where else "")
            parts: list[Any] | None = None
            if self.use_json:
                try:
                    aggregates = ", ".join(f"json_group_array({e})" for e in exprs)
                    row = self.con.execute(f"SELECT {aggregates} FROM {table} WHERE {cond}").fetchone()
                    parts = [orjson.loads(x) for x in row]
                except sqlite3.OperationalError:  # no JSON1 in this SQLite, or a value JSON cannot hold
                    self.use_json = False
            if parts is None:
                rows = self.con.execute(f"SELECT {', '.join(exprs)} FROM {table} WHERE {cond}").fetchall()
                parts = list(zip(*rows, strict=True)) if rows else [() for _ in exprs]
            for name, values in zip(names, parts, strict=True):
                out[name].extend(values)
        return out

    def strings(self, ids: Iterable[Any]) -> dict[int, str]:
        """StringIds values of `ids` (None and unknown ids are left out)."""
        wanted = sorted({i for i in ids if isinstance(i, int)})
        if not wanted or "StringIds" not in self.tables:
            return {}
        out: dict[int, str] = {}
        for k in range(0, len(wanted), _SQL_PARAMS):
            chunk = wanted[k : k + _SQL_PARAMS]
            marks = ", ".join("?" * len(chunk))
            out.update(self.con.execute(f"SELECT id, value FROM StringIds WHERE id IN ({marks})", chunk))
        return out

    def enum_ids(self, table: str, known: dict[str, int]) -> set[int]:
        """Ids of the enum names in `known`, read from the export's enum table when it has one."""
        if table in self.tables:
            names = list(known)
            marks = ", ".join("?" * len(names))
            rows = self.con.execute(f"SELECT id FROM {table} WHERE name IN ({marks})", names).fetchall()
            if rows:
                return {int(r[0]) for r in rows}
        return set(known.values())

    # ------------------------------------------------------------------ tables
    def kernels(self) -> None:
        t = KERNEL_TABLE
        c = self.col
        static, dynamic = c(t, "staticSharedMemory"), c(t, "dynamicSharedMemory")
        fields = {
            "start_ns": "start",
            "end_ns": "end",
            "device_id": c(t, "deviceId"),
            "stream_id": c(t, "streamId"),
            "grid_x": c(t, "gridX"),
            "grid_y": c(t, "gridY"),
            "grid_z": c(t, "gridZ"),
            "block_x": c(t, "blockX"),
            "block_y": c(t, "blockY"),
            "block_z": c(t, "blockZ"),
            "registers_per_thread": c(t, "registersPerThread"),
            "static_smem_bytes": static,
            "dynamic_smem_bytes": dynamic,
            "smem_bytes": f"{static} + {dynamic}" if "NULL" not in (static, dynamic) else "NULL",
            "correlation_id": c(t, "correlationId"),
            "graph_node_id": c(t, "graphNodeId"),
            "process_id": _PID_SQL.format(col=c(t, "globalPid")) if c(t, "globalPid") != "NULL" else "NULL",
            "_demangled": c(t, "demangledName"),
            "_short": c(t, "shortName"),
            "_mangled": c(t, "mangledName"),
        }
        cols = self.fetch(t, list(fields.values()), list(fields))
        demangled, short, mangled = cols.pop("_demangled"), cols.pop("_short"), cols.pop("_mangled")
        names = self.strings({*demangled, *short, *mangled})
        get = names.get
        cols["name"] = [get(d) or get(s) or get(m) or "" for d, s, m in zip(demangled, short, mangled, strict=True)]
        cols["mangled_name"] = [get(m) for m in mangled]
        unnamed = cols["name"].count("")
        if unnamed:
            self.ingest.warnings.append(f"{unnamed} kernels without a name in StringIds")
        self.ingest.tables["kernels"] = cols

    def memops(self) -> None:
        names = ["device_id", "stream_id", "start_ns", "end_ns", "bytes", "correlation_id"]
        out: Columns = {n: [] for n in ["kind", "name", *names]}
        labels = dict(MEMCPY_KINDS)
        if "ENUM_CUDA_MEMCPY_OPER" in self.tables and "label" in self.columns("ENUM_CUDA_MEMCPY_OPER"):
            labels.update(self.con.execute("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER WHERE label IS NOT NULL"))
        for table, kind in ((MEMCPY_TABLE, "memcpy"), (MEMSET_TABLE, "memset")):
            if table not in self.tables:
                continue
            c = self.col
            exprs = [
                c(table, "deviceId"),
                c(table, "streamId"),
                "start",
                "end",
                c(table, "bytes"),
                c(table, "correlationId"),
                c(table, "copyKind") if kind == "memcpy" else "NULL",
            ]
            cols = self.fetch(table, exprs, [*names, "_copy"])
            for n in names:
                out[n].extend(cols[n])
            out["kind"].extend([kind] * len(cols["_copy"]))
            if kind == "memset":
                out["name"].extend(["[CUDA memset]"] * len(cols["_copy"]))
            else:
                text = {k: f"[CUDA memcpy {labels.get(k, f'kind {k}')}]" for k in set(cols["_copy"])}
                out["name"].extend([text[k] for k in cols["_copy"]])
        if out["kind"]:
            self.ingest.tables["memops"] = out

    def launches(self) -> None:
        """Runtime/driver API calls whose correlation id launched a kernel, memcpy or memset."""
        t = RUNTIME_TABLE
        if t not in self.tables or "correlationId" not in self.columns(t):
            self.ingest.warnings.append(f"no {t} table: kernels cannot be traced to the calls that launched them")
            return
        gpu_work = [
            x
            for x in (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE)
            if x in self.tables and "correlationId" in self.columns(x)
        ]
        if not gpu_work:
            return
        # The launched ids go to an in-memory temp table (never the user's file) so that every rowid slice
        # of the runtime table probes one index instead of rebuilding it.
        self.con.execute("PRAGMA temp_store = MEMORY")
        self.con.execute("CREATE TEMP TABLE IF NOT EXISTS _launched (id INTEGER PRIMARY KEY)")
        self.con.execute(
            "INSERT OR IGNORE INTO _launched "
            + " UNION ALL ".join(f"SELECT correlationId FROM {x} WHERE correlationId IS NOT NULL" for x in gpu_work)
        )
        where = "correlationId IN _launched"
        if "eventClass" in self.columns(t):
            where += f" AND eventClass NOT IN ({_id_list(self.enum_ids('ENUM_NSYS_EVENT_CLASS', BACKTRACE_CLASSES))})"
        tid = self.col(t, "globalTid")
        cols = self.fetch(
            t,
            [
                "correlationId",
                self.col(t, "nameId"),
                "start",
                "end",
                _PID_SQL.format(col=tid),
                _TID_SQL.format(col=tid),
            ],
            ["correlation_id", "_name", "start_ns", "end_ns", "process_id", "thread_id"],
            where,
        )
        name_ids = cols.pop("_name")
        names = {i: _API_VERSION_SUFFIX.sub("", s) for i, s in self.strings(name_ids).items()}
        cols["name"] = [names.get(i, "") for i in name_ids]
        self.ingest.tables["launches"] = cols

    def ranges(self) -> None:
        """NVTX push/pop and start/end ranges, on the CPU thread that opened them."""
        t = NVTX_TABLE
        if t not in self.tables:
            return
        c = self.col
        range_types = _id_list(self.enum_ids("ENUM_NSYS_EVENT_TYPE", NVTX_RANGE_TYPES))
        mark_types = _id_list(self.enum_ids("ENUM_NSYS_EVENT_TYPE", NVTX_MARK_TYPES))
        domain_types = _id_list(self.enum_ids("ENUM_NSYS_EVENT_TYPE", NVTX_DOMAIN_CREATE_TYPES))
        text, text_id, domain_id, tid = c(t, "text"), c(t, "textId"), c(t, "domainId"), c(t, "globalTid")
        pid_sql, tid_sql = _PID_SQL.format(col=tid), _TID_SQL.format(col=tid)
        marks, open_ranges = self.con.execute(
            f"SELECT coalesce(sum(eventType IN ({mark_types})), 0), "
            f"coalesce(sum(eventType IN ({range_types}) AND end IS NULL), 0) FROM {t}"
        ).fetchone()
        if marks:
            self.ingest.warnings.append(f"{marks} NVTX marks skipped (instants, not ranges)")
        if open_ranges:
            self.ingest.warnings.append(f"{open_ranges} NVTX ranges without an end skipped (open at capture stop)")
        cols = self.fetch(
            t,
            ["start", "end", text, text_id, pid_sql, tid_sql, domain_id],
            ["start_ns", "end_ns", "_text", "_text_id", "process_id", "thread_id", "_domain"],
            f"eventType IN ({range_types}) AND end IS NOT NULL",
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
        cols["name"] = [x if x is not None else strings.get(i, "") for x, i in zip(texts, text_ids, strict=True)]
        cols["domain"] = [
            None if not d else domains.get((p, d)) or domains.get((None, d)) or f"domain {d}"
            for p, d in zip(cols["process_id"], dids, strict=True)
        ]
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
        c = self.col
        fields = {
            "_gpu_id": c(t, "id"),
            "_cu_device": c(t, "cuDevice"),
            "name": c(t, "name"),
            "num_sms": c(t, "smCount"),
            "compute_major": c(t, "computeMajor"),
            "compute_minor": c(t, "computeMinor"),
            "regs_per_sm": c(t, "maxRegistersPerSm"),
            "regs_per_block": c(t, "maxRegistersPerBlock"),
            "smem_per_sm_bytes": c(t, "maxShmemPerSm"),
            "smem_per_block_optin_bytes": c(t, "maxShmemPerBlockOptin"),
            "max_threads_per_block": c(t, "maxThreadsPerBlock"),
            "max_blocks_per_sm": c(t, "maxBlocksPerSm"),
            "max_warps_per_sm": c(t, "maxWarpsPerSm"),
            "warp_size": c(t, "threadsPerWarp"),
            "total_mem_bytes": c(t, "totalMemory"),
            "mem_bandwidth_bytes_per_s": c(t, "memoryBandwidth"),
            "clock_hz": c(t, "clockRate"),
            "l2_bytes": c(t, "l2CacheSize"),
        }
        rows = self.con.execute(f"SELECT {', '.join(fields.values())} FROM {t} ORDER BY {fields['_gpu_id']}")
        gpus = [dict(zip(fields, r, strict=True)) for r in rows]
        # TARGET_INFO_CUDA_DEVICE maps a GPU (TARGET_INFO_GPU.id) to the ordinal each traced process saw it as;
        # where it maps any GPU, GPUs it leaves out were not used. Older exports lack it: then cuDevice, else id.
        ordinals: dict[int, list[int]] = {}
        if CUDA_DEVICE_TABLE in self.tables and {"gpuId", "cudaId"} <= self.columns(CUDA_DEVICE_TABLE):
            for gpu_id, cuda_id in self.con.execute(
                f"SELECT DISTINCT gpuId, cudaId FROM {CUDA_DEVICE_TABLE} "
                "WHERE gpuId IS NOT NULL AND cudaId IS NOT NULL ORDER BY 1, 2"
            ):
                ordinals.setdefault(gpu_id, []).append(cuda_id)
        names = ["device_id", *[f for f in fields if not f.startswith("_")], "max_threads_per_sm"]
        cols: Columns = {n: [] for n in names}
        seen: dict[int, str] = {}
        for gpu in gpus:
            if ordinals:
                ids = ordinals.get(gpu["_gpu_id"], [])
            else:
                ids = [gpu["_cu_device"] if gpu["_cu_device"] is not None else gpu["_gpu_id"]]
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
                row = {
                    **gpu,
                    "device_id": device_id,
                    "max_threads_per_sm": warps * warp if warps is not None and warp is not None else None,
                }
                for n in names:
                    cols[n].append(row[n])
        self.ingest.tables["devices"] = cols
