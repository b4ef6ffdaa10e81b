"""Generators of hostile inputs for every reader, shared by the fuzz tests (tests/test_fuzz_*.py) and the long
run (benchmarks/fuzz_long.py).

Three kinds of input:
- generated minimal valid traces: Kineto JSON with a few annotated steps (launch -> kernel), Nsight Systems
  SQLite exports built with `sqlite3` from the CREATE statements of the real export
  `../shared/traces/h200/flashinfer_decode.sqlite`, Nsight Compute raw-page CSVs with the real header, sidecars;
- the same with mutated fields (wrong types, missing keys, negative or overflowing times, NaN, huge grids,
  non-UTF-8 names, dropped tables and columns);
- the real traces cut or damaged at every layer (gzip stream, JSON text, SQLite pages, CSV lines).

`check_input` is the property every input must satisfy: `traceinsight.pipeline.analyze` (ingest, labels,
steps, findings) either returns, or raises a TraceInsightError whose message is one line; any other exception,
and an example running past a hard time limit, fail.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import math
import os
import signal
import sqlite3
import tempfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from traceinsight.errors import TraceInsightError

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces"
H200 = TRACES / "h200"
FOREIGN = TRACES / "foreign"

NSYS_REAL = H200 / "flashinfer_decode.sqlite"
NCU_REAL = H200 / "flashinfer_decode.ncu.csv"
KINETO_SMALL = H200 / "flashinfer_decode_small.pt.trace.json.gz"
# Real files each reader is fuzzed from (small enough to parse hundreds of times).
KINETO_REAL = (KINETO_SMALL, FOREIGN / "hta_a100_alexnet_critical_path_trace.json.gz")
SQLITE_REAL = (
    NSYS_REAL,
    FOREIGN / "fuser_h200_report1.sqlite",
    FOREIGN / "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
)
SIDECAR_REAL = (H200 / "flashinfer_decode.nsys.meta.json", H200 / "flashinfer_decode_sweep.meta.json.gz")

# Kernel names as the H200 captures print them (Kineto spelling), and a few others.
DECODE_KERNEL = (
    "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 1u, 8u, 16u, 8u, 1u, "
    "flashinfer::DefaultAttention<false, false, false, false>, Params>(Params)"
)
MERGE_KERNEL = (
    "void flashinfer::PersistentVariableLengthMergeStatesKernel<8u, 16u, 8u, 4u, __nv_bfloat16, __nv_bfloat16, int>"
    "(__nv_bfloat16*, float*, int*, __nv_bfloat16*, float*, unsigned int, unsigned int*, unsigned int)"
)
FA2_KERNEL = (
    "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)0, 16u, 1u, "
    "1u, 8u, 8u, 1u, 4u, (flashinfer::PosEncodingMode)0, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, int, "
    "flashinfer::DefaultAttention<false, false, false, false> >, PagedParams>(PagedParams)"
)
OTHER_KERNELS = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
    "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
)
KERNEL_NAMES = (DECODE_KERNEL, MERGE_KERNEL, FA2_KERNEL, *OTHER_KERNELS)

H200_PROPS = {
    "id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320, "computeMajor": 9, "computeMinor": 0,
    "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
    "sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448,
    "sharedMemPerMultiprocessor": 233472,
}  # fmt: skip

# Marker put in a string value; `dump_json` replaces it with bytes that are not UTF-8.
BAD_UTF8_MARK = "@@not-utf8@@"
BAD_UTF8_BYTES = b"\xff\xfe\xc3("
# Marker string `dump_json` replaces (quotes included) by a 5000-digit integer: more digits than Python's int()
# converts by default (4300), a JSON value orjson reads as a float and the json module refuses.
BIG_INT_MARK = "@@5000-digits@@"
BIG_INT_TEXT = b"9" * 5000


# ================================================================================ test settings
def fuzz_settings(max_examples: int) -> settings:
    """Settings of every fuzz test: fixed seeds (derandomize), bounded examples, a per-example deadline well above
    the ~0.1 s an example takes, no example database. The long run (benchmarks/fuzz_long.py) sets
    $TRACEINSIGHT_FUZZ_SCALE (examples times this) and $TRACEINSIGHT_FUZZ_RANDOM=1 (fresh seeds) before import."""
    scale = float(os.environ.get("TRACEINSIGHT_FUZZ_SCALE", "1") or 1)
    return settings(
        max_examples=max(1, int(max_examples * scale)),
        derandomize=os.environ.get("TRACEINSIGHT_FUZZ_RANDOM") != "1",
        database=None,
        deadline=timedelta(seconds=20),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        print_blob=True,
    )


@contextlib.contextmanager
def scratch(name: str) -> Iterator[Path]:
    """A path `name` inside a fresh private temporary folder, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="traceinsight-fuzz-") as folder:
        yield Path(folder) / name


# ================================================================================ hostile values
INT_EDGES = (
    0,
    -1,
    1,
    2**31 - 1,
    2**31,
    -(2**31) - 1,
    2**53 + 1,
    2**63 - 1,
    2**63,
    -(2**63),
    -(2**63) - 1,
    2**64,
    10**30,
)
FLOAT_EDGES = (math.nan, math.inf, -math.inf, -0.0, 1e308, -1e308, 5e-324, 0.5, 1e19, -1e19)


def hostile_scalars(big_int: bool = True) -> st.SearchStrategy[Any]:
    """JSON scalars a field should not hold: wrong types, edges of int32/int64, non-finite floats, odd text
    (`big_int`: also the 5000-digit integer, BIG_INT_MARK)."""
    marks = [BAD_UTF8_MARK, BIG_INT_MARK] if big_int else [BAD_UTF8_MARK]
    return st.one_of(
        st.none(),
        st.booleans(),
        st.sampled_from(INT_EDGES),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.sampled_from(FLOAT_EDGES),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from(["", " ", "stream 7", "stream x", "12", "-3", "1e9", "NaN", "\ud800", "\x00", *marks]),
        st.text(max_size=12),
    )


def hostile_values(big_int: bool = True) -> st.SearchStrategy[Any]:
    """Hostile scalars, and small containers of them (a grid of three huge numbers, an object for a list...)."""
    grids = st.lists(st.sampled_from(INT_EDGES + (1.5, None, "4")), min_size=0, max_size=4)
    return st.one_of(
        hostile_scalars(big_int),
        grids,
        st.dictionaries(st.sampled_from(["id", "name", "x", "grid"]), hostile_scalars(big_int), max_size=3),
    )


# ================================================================================ Kineto JSON
@st.composite
def kineto_doc(draw: st.DrawFn, max_steps: int = 4) -> dict[str, Any]:
    """A minimal valid torch.profiler trace: `max_steps` record_function steps, each launching one to three
    kernels (cudaLaunchKernel -> kernel by correlation id), with the GPU-side projection of each annotation."""
    events: list[dict[str, Any]] = []
    t = 1_000_000.0  # us
    corr = 1
    for s in range(draw(st.integers(0, max_steps))):
        batch = draw(st.sampled_from([8, 32, 128, 256, 384]))
        name = f"decode tc=0 dist={draw(st.sampled_from(['uniform', 'skew80']))} bs={batch} step={s}"
        step_start = t
        gpu_start = None
        gpu_end = t
        for _ in range(draw(st.integers(1, 3))):
            kname = draw(st.sampled_from(KERNEL_NAMES))
            kdur = draw(st.floats(0.5, 5000.0, allow_nan=False))
            grid = [draw(st.sampled_from([132, 256, 288, 1188, 1584])), draw(st.sampled_from([1, 4])), 1]
            events.append(
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 482, "tid": 482,
                 "ts": round(t, 3), "dur": 4.5, "args": {"correlation": corr, "cbid": 211}}
            )  # fmt: skip
            kstart = max(t + 8.0, gpu_end + 1.0)
            events.append(
                {"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": 7, "ts": round(kstart, 3),
                 "dur": round(kdur, 3),
                 "args": {"device": 0, "stream": 7, "correlation": corr, "registers per thread": 56,
                          "shared memory": 8704, "grid": grid, "block": [16, 8, 1]}}
            )  # fmt: skip
            gpu_start = kstart if gpu_start is None else gpu_start
            gpu_end = kstart + kdur
            corr += 1
            t += 10.0
        t = max(t, gpu_end) + 5.0
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": name, "pid": 482, "tid": 482, "ts": round(step_start, 3),
             "dur": round(t - step_start, 3), "args": {}}
        )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": 0, "tid": 7,
             "ts": round(gpu_start or step_start, 3), "dur": round(gpu_end - (gpu_start or step_start), 3), "args": {}}
        )  # fmt: skip
        t += 20.0
    return {"schemaVersion": 1, "deviceProperties": [dict(H200_PROPS)], "traceEvents": events, "cupti_version": 26}


KINETO_EVENT_KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args")
KINETO_ARG_KEYS = ("device", "stream", "correlation", "grid", "block", "registers per thread", "shared memory", "bytes")
KINETO_TOP_KEYS = ("traceEvents", "deviceProperties", "schemaVersion", "cupti_version")


@st.composite
def kineto_mutation(draw: st.DrawFn, doc: dict[str, Any], big_int: bool = True) -> str:
    """Apply one mutation to `doc` in place; return what was done (for the failure report)."""
    events = doc["traceEvents"] if isinstance(doc.get("traceEvents"), list) else []
    kind = draw(st.sampled_from(["event_field", "arg_field", "drop_key", "replace_event", "top_level", "device"]))
    if kind in ("event_field", "arg_field", "drop_key", "replace_event") and not events:
        kind = "top_level"
    dicts = [e for e in events if isinstance(e, dict)]
    if kind in ("event_field", "arg_field", "drop_key") and not dicts:
        kind = "replace_event"
    if kind == "event_field":
        e = draw(st.sampled_from(dicts))
        key = draw(st.sampled_from(KINETO_EVENT_KEYS))
        e[key] = draw(hostile_values(big_int))
        return f"event {e.get('cat')!r}.{key} = {e[key]!r}"
    if kind == "arg_field":
        e = draw(st.sampled_from(dicts))
        if not isinstance(e.get("args"), dict):
            e["args"] = {}
        key = draw(st.sampled_from(KINETO_ARG_KEYS))
        e["args"][key] = draw(hostile_values(big_int))
        return f"event {e.get('cat')!r}.args.{key} = {e['args'][key]!r}"
    if kind == "drop_key":
        e = draw(st.sampled_from(dicts))
        key = draw(st.sampled_from(KINETO_EVENT_KEYS))
        e.pop(key, None)
        return f"event {e.get('cat')!r} without {key}"
    if kind == "replace_event":
        i = draw(st.integers(0, len(events) - 1))
        events[i] = draw(hostile_values(big_int))
        return f"traceEvents[{i}] = {events[i]!r}"
    if kind == "top_level":
        key = draw(st.sampled_from(KINETO_TOP_KEYS))
        doc[key] = draw(hostile_values(big_int))
        return f"{key} = {doc[key]!r}"
    props = doc.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict):
        key = draw(st.sampled_from(sorted(H200_PROPS)))
        props[0][key] = draw(hostile_values(big_int))
        return f"deviceProperties[0].{key} = {props[0][key]!r}"
    return "nothing"


@st.composite
def mutated_kineto(draw: st.DrawFn, big_int: bool = True) -> tuple[dict[str, Any], list[str]]:
    doc = draw(kineto_doc())
    done = [draw(kineto_mutation(doc, big_int)) for _ in range(draw(st.integers(1, 4)))]
    return doc, done


def dump_json(doc: Any, compress: bool = False) -> bytes:
    """Serialize with the spellings real files have: bare NaN/Infinity for non-finite floats, \\uXXXX escapes for
    lone surrogates, and BAD_UTF8_MARK replaced by bytes that are not UTF-8."""
    data = json.dumps(doc, allow_nan=True).encode("ascii").replace(BAD_UTF8_MARK.encode(), BAD_UTF8_BYTES)
    data = data.replace(b'"' + BIG_INT_MARK.encode() + b'"', BIG_INT_TEXT)
    return gzip.compress(data, mtime=0) if compress else data


@cache
def real_bytes(path: Path) -> bytes:
    return path.read_bytes()


@cache
def real_json_text(path: Path) -> bytes:
    """The JSON text of a real (possibly gzipped) trace."""
    data = real_bytes(path)
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


@st.composite
def cut_kineto(draw: st.DrawFn) -> tuple[bytes, str]:
    """A real Kineto trace cut or damaged at one layer: the gzip stream (cut, flipped byte, trailing junk), or
    the JSON text (cut at a random byte or just after an event, then gzipped again or left plain)."""
    path = draw(st.sampled_from(KINETO_REAL))
    raw = real_bytes(path)
    text = real_json_text(path)
    layer = draw(st.sampled_from(["gzip_cut", "gzip_flip", "gzip_trailing", "json_cut", "json_event_cut"]))
    if layer == "gzip_cut":
        at = draw(st.integers(0, len(raw) - 1))
        return raw[:at], f"{path.name} gzip stream cut at byte {at} of {len(raw)}"
    if layer == "gzip_flip":
        at = draw(st.integers(0, len(raw) - 1))
        return raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1 :], f"{path.name} gzip byte {at} flipped"
    if layer == "gzip_trailing":
        junk = draw(st.sampled_from([b"\x00" * 512, b"garbage", b"\x1f\x8b\x08", raw[:100]]))
        return raw + junk, f"{path.name} + trailing {junk[:8]!r}"
    if layer == "json_cut":
        at = draw(st.integers(1, len(text) - 1))
        how = draw(st.booleans())
        body = text[:at]
        return (gzip.compress(body, mtime=0) if how else body), f"{path.name} JSON cut at byte {at} (gzip={how})"
    # just after the k-th complete event: what a crashed writer that flushes per event leaves
    ends = _event_ends(path)
    k = draw(st.integers(0, len(ends) - 1))
    return gzip.compress(text[: ends[k]], mtime=0), f"{path.name} JSON cut after event {k} (byte {ends[k]})"


@cache
def _event_ends(path: Path) -> tuple[int, ...]:
    """Byte offsets just after each `}` that closes a top-level traceEvents entry (sampled, at most 400): Kineto
    pretty-prints an entry's closing brace as the only thing on its line, indented two spaces."""
    text = real_json_text(path)
    ends = []
    pos = text.find(b'"traceEvents"')
    sep = b"\n  },\n" if b"\n  },\n" in text else b"},\n"
    while pos != -1 and len(ends) < 4000:
        pos = text.find(sep, pos + 1)
        if pos != -1:
            ends.append(pos + len(sep) - 2)
    step = max(1, len(ends) // 400)
    return tuple(ends[::step]) or (len(text) // 2,)


# ================================================================================ Nsight Systems SQLite
# Tables the generator creates (the CREATE statements are the real export's), with the enum tables' rows.
NSYS_TABLES = (
    "StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
    "NVTX_EVENTS", "TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE", "META_DATA_EXPORT", "ENUM_NSYS_EVENT_TYPE",
    "ENUM_NSYS_EVENT_CLASS", "ENUM_CUDA_MEMCPY_OPER",
)  # fmt: skip
ENUM_TABLES = ("ENUM_NSYS_EVENT_TYPE", "ENUM_NSYS_EVENT_CLASS", "ENUM_CUDA_MEMCPY_OPER")
GLOBAL_TID = 281501484713516  # pid 1580 << 24 | tid, as in the real export
GLOBAL_PID = 281501484711936


@cache
def nsys_schema() -> dict[str, str]:
    """CREATE statement of every table of the real nsys 2025.3 export, by table name."""
    con = sqlite3.connect(f"file:{NSYS_REAL}?mode=ro&immutable=1", uri=True)
    try:
        return dict(con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall())
    finally:
        con.close()


@cache
def nsys_real_rows(table: str) -> tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]]:
    """Column names and rows of a small table of the real export (enums, GPU info, export metadata)."""
    con = sqlite3.connect(f"file:{NSYS_REAL}?mode=ro&immutable=1", uri=True)
    try:
        cur = con.execute(f"SELECT * FROM {table}")
        return tuple(d[0] for d in cur.description), tuple(cur.fetchall())
    finally:
        con.close()


@dataclass
class NsysSpec:
    """What to put in a generated export: rows per table as {column: value}, plus what to leave out."""

    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    omit_tables: set[str] = field(default_factory=set)
    drop_columns: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _kernel_row(start: int, dur: int, corr: int, name_id: int, grid: tuple[int, int, int]) -> dict[str, Any]:
    return {
        "start": start, "end": start + dur, "deviceId": 0, "contextId": 1, "greenContextId": 0, "streamId": 7,
        "correlationId": corr, "globalPid": GLOBAL_PID, "demangledName": name_id, "shortName": name_id,
        "mangledName": None, "launchType": 1, "cacheConfig": 1, "registersPerThread": 56, "gridX": grid[0],
        "gridY": grid[1], "gridZ": grid[2], "blockX": 16, "blockY": 8, "blockZ": 1, "staticSharedMemory": 0,
        "dynamicSharedMemory": 8704, "localMemoryPerThread": 0, "localMemoryTotal": 0, "gridId": corr,
        "sharedMemoryExecuted": 32768, "graphNodeId": None, "sharedMemoryLimitConfig": 0,
    }  # fmt: skip


@st.composite
def nsys_spec(draw: st.DrawFn, max_steps: int = 4) -> NsysSpec:
    """A minimal valid export: NVTX push/pop ranges 'tc=0 dist=D bs=B', each around one to three launches."""
    spec = NsysSpec()
    strings: list[dict[str, Any]] = [{"id": 1, "value": "cudaLaunchKernel_v7000"}]
    for i, name in enumerate(KERNEL_NAMES, start=10):
        strings.append({"id": i, "value": name})
    kernels, runtime, nvtx = [], [], []
    t = 4_000_000_000
    corr = 100
    for _ in range(draw(st.integers(0, max_steps))):
        rstart = t
        for _ in range(draw(st.integers(1, 3))):
            name_id = 10 + draw(st.integers(0, len(KERNEL_NAMES) - 1))
            dur = draw(st.integers(1, 20_000_000))
            grid = (draw(st.sampled_from([132, 256, 1188])), draw(st.sampled_from([1, 4])), 1)
            runtime.append({"start": t, "end": t + 4000, "eventClass": 1, "globalTid": GLOBAL_TID,
                            "correlationId": corr, "nameId": 1, "returnValue": 0, "callchainId": None})  # fmt: skip
            kernels.append(_kernel_row(t + 9000, dur, corr, name_id, grid))
            t += 9000 + dur + 1000
            corr += 1
        batch = draw(st.sampled_from([8, 32, 128, 256, 384]))
        nvtx.append({"start": rstart, "end": t, "eventType": 59, "text": f"tc=0 dist=uniform bs={batch}",
                     "globalTid": GLOBAL_TID, "domainId": 0})  # fmt: skip
        t += 50_000
    gpu_cols, gpu_rows = nsys_real_rows("TARGET_INFO_GPU")
    spec.rows = {"StringIds": strings, "CUPTI_ACTIVITY_KIND_KERNEL": kernels,
                 "CUPTI_ACTIVITY_KIND_RUNTIME": runtime, "NVTX_EVENTS": nvtx,
                 "TARGET_INFO_GPU": [dict(zip(gpu_cols, r, strict=True)) for r in gpu_rows]}  # fmt: skip
    return spec


NSYS_MUTABLE = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                   "demangledName", "shortName", "registersPerThread", "gridX", "gridY", "gridZ",
                                   "blockX", "staticSharedMemory", "dynamicSharedMemory", "graphNodeId"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "eventClass", "globalTid", "correlationId", "nameId"),
    "NVTX_EVENTS": ("start", "end", "eventType", "text", "globalTid", "textId", "domainId"),
    "StringIds": ("id", "value"),
    "TARGET_INFO_GPU": ("id", "name", "smCount", "threadsPerWarp", "maxWarpsPerSm", "maxRegistersPerSm",
                        "maxShmemPerSm", "cuDevice", "computeMajor", "totalMemory"),
}  # fmt: skip
SQL_EDGES = (None, 0, -1, 2**31, 2**63 - 1, -(2**63), 1.5, 1e300, -1e300, "", "abc", "12", b"\x00\xff")


def sql_hostile() -> st.SearchStrategy[Any]:
    """Values SQLite stores in any column whatever its declared type: NULL, text, blobs, reals, int64 edges."""
    return st.one_of(
        st.sampled_from(SQL_EDGES),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=False),
        st.text(max_size=8),
        st.binary(max_size=8),
    )


@st.composite
def mutated_nsys(draw: st.DrawFn) -> NsysSpec:
    spec = draw(nsys_spec())
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["value", "value", "value", "omit_table", "drop_column", "bad_string"]))
        if kind == "value":
            table = draw(st.sampled_from(sorted(NSYS_MUTABLE)))
            rows = spec.rows.get(table) or []
            if not rows:
                continue
            row = draw(st.sampled_from(rows))
            col = draw(st.sampled_from(NSYS_MUTABLE[table]))
            row[col] = draw(sql_hostile())
            spec.notes.append(f"{table}.{col} = {row[col]!r}")
        elif kind == "omit_table":
            table = draw(st.sampled_from(NSYS_TABLES))
            spec.omit_tables.add(table)
            spec.notes.append(f"no {table}")
        elif kind == "drop_column":
            table = draw(st.sampled_from(sorted(NSYS_MUTABLE)))
            col = draw(st.sampled_from(NSYS_MUTABLE[table]))
            spec.drop_columns.append((table, col))
            spec.notes.append(f"{table} without column {col}")
        else:
            strings = spec.rows["StringIds"]
            row = draw(st.sampled_from(strings))
            row["value"] = sqlite3.Binary(BAD_UTF8_BYTES)  # cast to TEXT below: a non-UTF-8 TEXT value
            row["_as_text"] = True
            spec.notes.append(f"StringIds {row['id']} not UTF-8")
    return spec


def build_nsys_sqlite(path: Path, spec: NsysSpec) -> Path:
    """Write an Nsight Systems export from `spec` with the real export's CREATE statements."""
    schema = nsys_schema()
    con = sqlite3.connect(path)
    try:
        for table in NSYS_TABLES:
            if table in spec.omit_tables:
                continue
            con.execute(schema[table])
            if table in ENUM_TABLES or table in ("TARGET_INFO_CUDA_DEVICE", "META_DATA_EXPORT"):
                cols, rows = nsys_real_rows(table)
                marks = ", ".join("?" * len(cols))
                con.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})", rows)
            for row in spec.rows.get(table, []):
                cols = [c for c in row if not c.startswith("_")]
                values = ["CAST(? AS TEXT)" if row.get("_as_text") and c == "value" else "?" for c in cols]
                with contextlib.suppress(sqlite3.IntegrityError):  # a mutation broke NOT NULL / PRIMARY KEY
                    con.execute(
                        f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join(values)})", [row[c] for c in cols]
                    )
        for table, col in spec.drop_columns:
            with contextlib.suppress(sqlite3.OperationalError):  # table omitted, column already gone
                con.execute(f"ALTER TABLE {table} DROP COLUMN {col}")
        con.commit()
    finally:
        con.close()
    return path


@st.composite
def cut_sqlite(draw: st.DrawFn) -> tuple[bytes, str]:
    """A real export cut at a page boundary or any byte, or with one page overwritten."""
    path = draw(st.sampled_from(SQLITE_REAL))
    raw = real_bytes(path)
    page = int.from_bytes(raw[16:18], "big")
    pages = len(raw) // page
    how = draw(st.sampled_from(["page_cut", "byte_cut", "page_garbage", "page_zero"]))
    if how == "page_cut":
        k = draw(st.integers(1, pages - 1))
        return raw[: k * page], f"{path.name} cut after page {k} of {pages}"
    if how == "byte_cut":
        at = draw(st.integers(1, len(raw) - 1))
        return raw[:at], f"{path.name} cut at byte {at} of {len(raw)}"
    k = draw(st.integers(1, pages - 1))  # page 0 holds the header and schema root; damage the rest
    fill = draw(st.binary(min_size=page, max_size=page)) if how == "page_garbage" else bytes(page)
    return raw[: k * page] + fill + raw[(k + 1) * page :], f"{path.name} page {k + 1} {how}"


# ================================================================================ Nsight Compute CSV
@cache
def ncu_real_lines() -> tuple[str, ...]:
    return tuple(NCU_REAL.read_text(encoding="utf-8").splitlines(keepends=True))


@cache
def ncu_header() -> tuple[list[str], list[str], list[str]]:
    """Header, units row and the first kernel row of the real export."""
    rows = list(csv.reader(ln for ln in ncu_real_lines() if ln.startswith('"')))
    return rows[0], rows[1], rows[2]


def _csv_line(cells: list[str]) -> str:
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerow(cells)
    return buf.getvalue()


# Cells the mutator replaces ("ID" once: a bad ID is always a clean error and would hide the rest).
NCU_MUTABLE = (
    "ID", "Process ID", "Kernel Name", "Stream", "Block Size", "Block Size", "Grid Size", "Grid Size",
    "Device", "Device", "sm__cycles_active.avg", "sm__cycles_active.max", "sm__cycles_active.min",
)  # fmt: skip
NCU_HOSTILE_CELLS = (
    "", "n/a", "nan", "NaN", "inf", "-1", "1e400", "99999999999999999999", "(99999999999, 1, 1)", "(0, 0, 0)",
    "(-1, 4, 1)", "(2147483648, 1, 1)", "(1, 2)", "1,2,3", "+", ".", "1.5", BAD_UTF8_MARK, '"', "\x00", "x" * 300,
)  # fmt: skip


@st.composite
def ncu_csv(draw: st.DrawFn, mutate: bool = False) -> tuple[bytes, list[str]]:
    """A raw-page export with the real header and units, one to six kernels copied from the real first row
    with their identity cells varied; with `mutate`, some cells replaced by hostile text."""
    header, units, first = ncu_header()
    col = {n: i for i, n in enumerate(header)}
    lines = ["==PROF== Connected to process 911 (/usr/bin/python3.12)\n", _csv_line(header), _csv_line(units)]
    notes: list[str] = []
    for k in range(draw(st.integers(1, 6))):
        row = list(first)
        row[col["ID"]] = str(k)
        row[col["Grid Size"]] = f"({draw(st.sampled_from([132, 288, 1188]))}, 4, 1)"
        if mutate:
            for _ in range(draw(st.integers(0, 3))):
                name = draw(st.sampled_from(NCU_MUTABLE))
                row[col[name]] = draw(st.one_of(st.sampled_from(NCU_HOSTILE_CELLS), st.text(max_size=10)))
                notes.append(f"row {k} {name} = {row[col[name]]!r}")
        lines.append(_csv_line(row))
    data = "".join(lines)
    if mutate and draw(st.booleans()):
        structural = draw(st.sampled_from(["extra_cell", "missing_cell", "open_quote", "blank_lines", "crlf"]))
        notes.append(structural)
        if structural == "extra_cell":
            data = data.rstrip("\n") + ',"extra"\n'
        elif structural == "missing_cell":
            data = data.rstrip("\n").rsplit(",", 1)[0] + "\n"
        elif structural == "open_quote":
            data = data.rstrip("\n") + ',"unterminated\n'
        elif structural == "blank_lines":
            data = data.replace("\n", "\n\n", 3)
        else:
            data = data.replace("\n", "\r\n")
    return data.encode("utf-8").replace(BAD_UTF8_MARK.encode(), BAD_UTF8_BYTES), notes


@st.composite
def cut_ncu(draw: st.DrawFn) -> tuple[bytes, str]:
    """The real export cut at a line boundary or at any byte."""
    raw = real_bytes(NCU_REAL)
    if draw(st.booleans()):
        lines = ncu_real_lines()
        k = draw(st.integers(1, len(lines) - 1))
        data = "".join(lines[:k]).encode()
        return data, f"ncu CSV cut after line {k} of {len(lines)}"
    at = draw(st.integers(1, len(raw) - 1))
    return raw[:at], f"ncu CSV cut at byte {at} of {len(raw)}"


# ================================================================================ sidecars
@st.composite
def sidecar_doc(
    draw: st.DrawFn, mutate: bool = False, big_int: bool = True
) -> tuple[dict[str, Any] | list[Any], list[str]]:
    """A `traceinsight.sidecar/1` document (or a legacy case list) for the H200 nsys capture's cases."""
    legacy = draw(st.booleans())
    steps: list[dict[str, Any]] = []
    for b in draw(st.lists(st.sampled_from([8, 32, 128, 256, 384]), min_size=1, max_size=4, unique=True)):
        kv = [262144 // b] * b
        if legacy:
            steps.append(
                {"tc": 0, "dist": "uniform", "B": b, "kv_lens": kv, "plan_info": [b, 0, 0, 0, 0, 0, 0, 0, 0, 1]}
            )
        else:
            steps.append({"key": f"tc=0 dist=uniform bs={b}", "batch_size": b, "kv_lens": kv, "backend":
                          "flashinfer-cuda-core", "plan": {"padded_batch_size": b, "split_kv": True}})  # fmt: skip
    doc: dict[str, Any] | list[Any]
    if legacy:
        doc = steps
    else:
        doc = {"schema": "traceinsight.sidecar/1", "gpu": {"name": "NVIDIA H200", "num_sms": 132},
               "model": {"qo_heads": 32, "kv_heads": 4, "head_dim": 128, "page_size": 16}, "steps": steps}  # fmt: skip
    notes: list[str] = []
    if mutate:
        for _ in range(draw(st.integers(1, 3))):
            step = draw(st.sampled_from(steps))
            key = draw(st.sampled_from(sorted(step) + ["plan_info", "kv_lens"]))
            value = draw(st.one_of(hostile_values(big_int), st.lists(hostile_scalars(big_int), max_size=3)))
            step[key] = value
            notes.append(f"step.{key} = {value!r}")
            if isinstance(doc, dict) and draw(st.booleans()):
                top = draw(st.sampled_from(["schema", "gpu", "model", "steps", "software"]))
                doc[top] = draw(hostile_values(big_int))
                notes.append(f"{top} = {doc[top]!r}")
    return doc, notes


# ================================================================================ the property
class ExampleTimeout(Exception):
    """An example ran past its hard time limit (a hang)."""


@contextlib.contextmanager
def hard_time_limit(seconds: float) -> Iterator[None]:
    """Raise ExampleTimeout in the main thread after `seconds` (SIGALRM); a no-op where there is no SIGALRM."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def _alarm(signum: int, frame: Any) -> None:
        raise ExampleTimeout(f"no result after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Outcome:
    """What analyzing one input gave: 'ok' with counts, or 'error' with the one-line message."""

    kind: str
    message: str = ""
    steps: int = 0
    kernels: int = 0
    ranges: int = 0
    warnings: list[str] = field(default_factory=list)


# Inputs checked in this process, by outcome ('ok', 'error'); benchmarks/fuzz_long.py reports them.
STATS: Counter[str] = Counter()


def check_input(
    path: Path, *, meta: list[Path] | None = None, ncu: list[Path] | None = None, timeout_s: float = 30.0
) -> Outcome:
    """The fuzz property: analyzing `path` (with optional sidecars / ncu CSVs) returns, or raises a
    TraceInsightError with a non-empty one-line message. Anything else propagates (a bug); a hang raises
    ExampleTimeout."""
    from traceinsight.pipeline import analyze

    STATS["inputs"] += 1
    with hard_time_limit(timeout_s):
        try:
            db, analyses = analyze([path], meta=meta, ncu=ncu)
        except TraceInsightError as exc:
            msg = str(exc)
            assert msg and "\n" not in msg and "\r" not in msg, f"error message is not one line: {msg!r}"
            STATS["error"] += 1
            return Outcome("error", msg)
    try:
        steps = sum(len(a.steps) for a in analyses)
        warnings = [w for a in analyses for w in a.warnings]
        for w in warnings:
            assert "\n" not in w, f"warning is not one line: {w!r}"
        counts = db.rows("SELECT (SELECT count(*) FROM kernels) AS k, (SELECT count(*) FROM ranges) AS r")[0]
        STATS["ok"] += 1
        return Outcome("ok", steps=steps, kernels=counts["k"], ranges=counts["r"], warnings=warnings)
    finally:
        db.close()


def check_bytes(data: bytes, name: str, **kwargs: Any) -> Outcome:
    """`check_input` on `data` written to a private temporary file called `name`."""
    with scratch(name) as path:
        path.write_bytes(data)
        return check_input(path, **kwargs)


def check_built(name: str, build: Callable[[Path], Any], **kwargs: Any) -> Outcome:
    """`check_input` on a file that `build(path)` writes."""
    with scratch(name) as path:
        build(path)
        return check_input(path, **kwargs)


def gunzip_or_same(data: bytes) -> bytes:
    """Decompressed `data` when it is a complete gzip stream, else `data` (for reports)."""
    try:
        return zlib.decompress(data, wbits=31)
    except zlib.error:
        return data


# ================================================================================ scale
def build_nvtx_export(path: Path, n_ranges: int, n_steps: int = 100) -> None:
    """An export with `n_ranges` NVTX push/pop ranges (a tight loop instrumented per iteration), and `n_steps`
    decode steps: an outer range 'tc=0 dist=uniform bs=B' around one CUDA-core decode launch and its merge.
    Built with the real export's CREATE statements, in one transaction (about 1 µs per row)."""
    schema = nsys_schema()
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA journal_mode = OFF")
        con.execute("PRAGMA synchronous = OFF")
        for table in ("StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS",
                      "TARGET_INFO_GPU", "META_DATA_EXPORT"):  # fmt: skip
            con.execute(schema[table])
        for table in ("TARGET_INFO_GPU", "META_DATA_EXPORT"):
            cols, rows = nsys_real_rows(table)
            con.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows)
        con.executemany(
            "INSERT INTO StringIds VALUES (?, ?)",
            [(1, "cudaLaunchKernel_v7000"), (10, DECODE_KERNEL), (11, MERGE_KERNEL)]
            + [(100 + i, f"iteration {i}") for i in range(1000)],
        )
        step_ns = 1_000_000
        kernels, runtime = [], []
        for s in range(n_steps):
            t = 10_000_000 + s * step_ns
            for k, name_id in enumerate((10, 11)):
                corr = 2 * s + k + 1
                runtime.append((t + 1000 * k, t + 1000 * k + 500, 1, GLOBAL_TID, corr, 1, 0, None))
                row = _kernel_row(t + 5000 + 200_000 * k, 150_000, corr, name_id, (256, 4, 1))
                kernels.append(tuple(row.values()))
        con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * len(kernels[0]))})", kernels)
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, ?, ?)", runtime)
        nvtx_sql = "INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId, globalTid) VALUES (?, ?, 59, ?, ?, ?)"
        con.executemany(
            nvtx_sql,
            ((10_000_000 + s * step_ns - 100, 10_000_000 + s * step_ns + 900_000, f"tc=0 dist=uniform bs={8 + s}", None,
              GLOBAL_TID) for s in range(n_steps)),
        )  # fmt: skip
        span = n_steps * step_ns
        con.executemany(
            nvtx_sql,
            ((10_000_000 + i * span // max(n_ranges, 1), 10_000_000 + i * span // max(n_ranges, 1) + 50, None,
              100 + i % 1000, GLOBAL_TID) for i in range(n_ranges)),
        )  # fmt: skip
        con.commit()
    finally:
        con.close()
