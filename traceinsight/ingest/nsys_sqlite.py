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

# Rows fetched per round trip; bounds the transient tuples held while columns are built.
FETCH_ROWS = 65536

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
BACKTRACE_CLASSES = {"TRACE_PROCESS_EVENT_CUDABACKTRACE": 67, "TRACE_PROCESS_EVENT_CUDABACKTRACE_START": 68,
                     "TRACE_PROCESS_EVENT_CUDABACKTRACE_FINISH": 69}

# CUpti_ActivityMemcpyKind labels, as ENUM_CUDA_MEMCPY_OPER states them in exports that have it.
MEMCPY_KINDS = {
    0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array", 4: "Array-to-Host",
    5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array", 8: "Device-to-Device", 9: "Host-to-Host",
    10: "Peer-to-Peer", 11: "Unified Host-to-Device", 12: "Unified Device-to-Host",
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
    """Open `path` read-only and immutable; sqlite never writes a journal, WAL or index beside it."""
    uri = f"file:{quote(str(Path(path).absolute()))}?mode=ro&immutable=1"
    try:
        return sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise FormatError(f"{path}: cannot open as SQLite ({_first_line(exc)})") from None


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

    def __init__(self, con: sqlite3.Connection, tables: set[str], ingest: Ingest) -> None:
        self.con = con
        self.tables = tables
        self.ingest = ingest
        self._cols: dict[str, set[str]] = {}

    # ------------------------------------------------------------------ helpers
    def columns(self, table: str) -> set[str]:
        if table not in self._cols:
            self._cols[table] = {r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')}
        return self._cols[table]

    def col(self, table: str, name: str, expr: str | None = None) -> str:
        """`expr` (default: the column itself) when `table` has column `name`, else NULL."""
        return (expr or name) if name in self.columns(table) else "NULL"

    def fetch(self, sql: str, names: list[str], params: Iterable[Any] = ()) -> Columns:
        """Run `sql` and return its result as one list per column, fetched in chunks."""
        out: list[list[Any]] = [[] for _ in names]
        cur = self.con.execute(sql, tuple(params))
        while rows := cur.fetchmany(FETCH_ROWS):
            for column, values in zip(out, zip(*rows, strict=True), strict=True):
                column.extend(values)
        return dict(zip(names, out, strict=True))

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
        smem = f"{static} + {dynamic}" if "NULL" not in (static, dynamic) else "NULL"
        cols = self.fetch(
            f"SELECT start, end, {c(t, 'deviceId')}, {c(t, 'streamId')}, {c(t, 'gridX')}, {c(t, 'gridY')}, "
            f"{c(t, 'gridZ')}, {c(t, 'blockX')}, {c(t, 'blockY')}, {c(t, 'blockZ')}, "
            f"{c(t, 'registersPerThread')}, {static}, {dynamic}, {smem}, {c(t, 'correlationId')}, "
            f"{c(t, 'graphNodeId')}, {c(t, 'demangledName')}, {c(t, 'shortName')}, {c(t, 'mangledName')} "
            f"FROM {t}",
            ["start_ns", "end_ns", "device_id", "stream_id", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
             "block_z", "registers_per_thread", "static_smem_bytes", "dynamic_smem_bytes", "smem_bytes",
             "correlation_id", "graph_node_id", "_demangled", "_short", "_mangled"],
        )
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
        parts: list[Columns] = []
        names = ["kind", "_copy", "device_id", "stream_id", "start_ns", "end_ns", "bytes", "correlation_id"]
        if MEMCPY_TABLE in self.tables:
            t = MEMCPY_TABLE
            c = self.col
            parts.append(self.fetch(
                f"SELECT 'memcpy', {c(t, 'copyKind')}, {c(t, 'deviceId')}, {c(t, 'streamId')}, start, end, "
                f"{c(t, 'bytes')}, {c(t, 'correlationId')} FROM {t}",
                names,
            ))
        if MEMSET_TABLE in self.tables:
            t = MEMSET_TABLE
            c = self.col
            parts.append(self.fetch(
                f"SELECT 'memset', NULL, {c(t, 'deviceId')}, {c(t, 'streamId')}, start, end, {c(t, 'bytes')}, "
                f"{c(t, 'correlationId')} FROM {t}",
                names,
            ))
        if not parts:
            return
        labels = dict(MEMCPY_KINDS)
        if "ENUM_CUDA_MEMCPY_OPER" in self.tables and "label" in self.columns("ENUM_CUDA_MEMCPY_OPER"):
            labels.update(self.con.execute("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER WHERE label IS NOT NULL"))
        cols: Columns = {n: [] for n in names}
        for part in parts:
            for n in names:
                cols[n].extend(part[n])
        copy = cols.pop("_copy")
        cols["name"] = [
            "[CUDA memset]" if kind == "memset" else f"[CUDA memcpy {labels.get(ck, f'kind {ck}')}]"
            for kind, ck in zip(cols["kind"], copy, strict=True)
        ]
        self.ingest.tables["memops"] = cols

    def launches(self) -> None:
        """Runtime/driver API calls whose correlation id launched a kernel, memcpy or memset."""
        if RUNTIME_TABLE not in self.tables:
            self.ingest.warnings.append(f"no {RUNTIME_TABLE} table: kernels cannot be traced to their launches")
            return
        t = RUNTIME_TABLE
        gpu_work = [x for x in (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE)
                    if x in self.tables and "correlationId" in self.columns(x)]
        if not gpu_work or "correlationId" not in self.columns(t):
            return
        launched = " UNION ".join(f"SELECT correlationId FROM {x}" for x in gpu_work)
        where = f"correlationId IN ({launched})"
        if "eventClass" in self.columns(t):
            where += f" AND eventClass NOT IN ({_id_list(self.enum_ids('ENUM_NSYS_EVENT_CLASS', BACKTRACE_CLASSES))})"
        tid = self.col(t, "globalTid")
        cols = self.fetch(
            f"SELECT correlationId, {self.col(t, 'nameId')}, start, end, {_PID_SQL.format(col=tid)}, "
            f"{_TID_SQL.format(col=tid)} FROM {t} WHERE {where}",
            ["correlation_id", "_name", "start_ns", "end_ns", "process_id", "thread_id"],
        )
        name_ids = cols.pop("_name")
        names = {i: _API_VERSION_SUFFIX.sub("", s) for i, s in self.strings(name_ids).items()}
        cols["name"] = [names.get(i, "") for i in name_ids]
        self.ingest.tables["launches"] = cols

    def ranges(self) -> None:
        """NVTX push/pop and start/end ranges, on the CPU thread that opened them."""
        if NVTX_TABLE not in self.tables:
            return
        t = NVTX_TABLE
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
            f"SELECT start, end, {text}, {text_id}, {pid_sql}, {tid_sql}, {domain_id} FROM {t} "
            f"WHERE eventType IN ({range_types}) AND end IS NOT NULL",
            ["start_ns", "end_ns", "_text", "_text_id", "process_id", "thread_id", "_domain"],
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
            "_gpu_id": c(t, "id"), "_cu_device": c(t, "cuDevice"), "name": c(t, "name"),
            "num_sms": c(t, "smCount"), "compute_major": c(t, "computeMajor"),
            "compute_minor": c(t, "computeMinor"), "regs_per_sm": c(t, "maxRegistersPerSm"),
            "regs_per_block": c(t, "maxRegistersPerBlock"), "smem_per_sm_bytes": c(t, "maxShmemPerSm"),
            "smem_per_block_optin_bytes": c(t, "maxShmemPerBlockOptin"),
            "max_threads_per_block": c(t, "maxThreadsPerBlock"), "max_blocks_per_sm": c(t, "maxBlocksPerSm"),
            "max_warps_per_sm": c(t, "maxWarpsPerSm"), "warp_size": c(t, "threadsPerWarp"),
            "total_mem_bytes": c(t, "totalMemory"), "mem_bandwidth_bytes_per_s": c(t, "memoryBandwidth"),
            "clock_hz": c(t, "clockRate"), "l2_bytes": c(t, "l2CacheSize"),
        }
        rows = self.con.execute(f"SELECT {', '.join(fields.values())} FROM {t} ORDER BY {fields['_gpu_id']}")
        gpus = [dict(zip(fields, r, strict=True)) for r in rows]
        # TARGET_INFO_CUDA_DEVICE maps a GPU (TARGET_INFO_GPU.id) to the ordinal a process saw it as.
        ordinals: dict[int, list[int]] = {}
        if CUDA_DEVICE_TABLE in self.tables and {"gpuId", "cudaId"} <= self.columns(CUDA_DEVICE_TABLE):
            for gpu_id, cuda_id in self.con.execute(
                f"SELECT DISTINCT gpuId, cudaId FROM {CUDA_DEVICE_TABLE} WHERE gpuId IS NOT NULL ORDER BY 1, 2"
            ):
                ordinals.setdefault(gpu_id, []).append(cuda_id)
        names = ["device_id", *[f for f in fields if not f.startswith("_")], "max_threads_per_sm"]
        cols: Columns = {n: [] for n in names}
        seen: dict[int, str] = {}
        for gpu in gpus:
            ids = ordinals.get(gpu["_gpu_id"]) or [gpu["_cu_device"] if gpu["_cu_device"] is not None
                                                   else gpu["_gpu_id"]]
            for device_id in ids:
                if device_id is None:
                    continue
                if device_id in seen:
                    if seen[device_id] != gpu["name"]:
                        self.ingest.warnings.append(
                            f"two GPUs ({seen[device_id]}, {gpu['name']}) as CUDA device {device_id}; kept the first"
                        )
                    continue
                seen[device_id] = gpu["name"]
                warps, warp = gpu["max_warps_per_sm"], gpu["warp_size"]
                row = {**gpu, "device_id": device_id,
                       "max_threads_per_sm": warps * warp if warps is not None and warp is not None else None}
                for n in names:
                    cols[n].append(row[n])
        self.ingest.tables["devices"] = cols
