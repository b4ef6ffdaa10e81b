"""Kineto / torch.profiler JSON traces (`.json`, `.json.gz`, `.pt.trace.json.gz`) -> normalized tables.

Both the current format (categories `kernel`, `gpu_memcpy`, `cuda_runtime`, `user_annotation`, ...) and the
2021 one (`Kernel`, `Memcpy`, `Runtime`, `Operator`, GPU `tid` as the string "stream 7") are read.

Units: Kineto writes `ts` and `dur` in microseconds (floats with three decimals, or integers in older files)
on its own clock (relative to `baseTimeNanoseconds` when the file has that key). Rows keep that clock, in
int64 nanoseconds: `start_ns = round(ts * 1000)` and `end_ns = start_ns + round(dur * 1000)`, so that
`dur_ns` is exactly the duration the file states (rounding `ts + dur` in floating point can be 1 ns off).
"""

from __future__ import annotations

import gc
import json
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from traceinsight.errors import FormatError, InputError
from traceinsight.ingest.base import Columns, Ingest

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"

# Key under which `load_json` leaves, in the parsed document, what it had to repair (read by `from_document`).
REPAIRS_KEY = "__traceinsight_repairs__"

# ---------------------------------------------------------------- what each event category becomes (data)
KERNEL_CATS = frozenset({"kernel", "Kernel"})  # current, 2021
MEMOP_CATS = {"gpu_memcpy": "memcpy", "Memcpy": "memcpy", "gpu_memset": "memset", "Memset": "memset"}
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime"})  # host API calls; kept when they launched GPU work
# category -> (ranges.kind, ranges.side)
RANGE_CATS = {"user_annotation": ("annotation", "cpu"), "gpu_user_annotation": ("gpu_annotation", "gpu")}
# Operator categories that carry the profiler's step ranges in traces without `user_annotation` (2021 format).
STEP_OP_CATS = frozenset({"Operator", "cpu_op"})
PROFILER_STEP_PREFIX = "ProfilerStep#"

_KERNEL, _MEMOP, _LAUNCH, _RANGE, _STEP_OP = range(5)
_DISPATCH: dict[str, int] = {
    **dict.fromkeys(KERNEL_CATS, _KERNEL),
    **dict.fromkeys(MEMOP_CATS, _MEMOP),
    **dict.fromkeys(LAUNCH_CATS, _LAUNCH),
    **dict.fromkeys(RANGE_CATS, _RANGE),
    **dict.fromkeys(STEP_OP_CATS, _STEP_OP),
}

# devices column -> deviceProperties key (Kineto writes the names of cudaDeviceProp's fields).
DEVICE_PROPERTIES: dict[str, str] = {
    "name": "name",
    "num_sms": "numSms",
    "compute_major": "computeMajor",
    "compute_minor": "computeMinor",
    "regs_per_sm": "regsPerMultiprocessor",
    "regs_per_block": "regsPerBlock",
    "smem_per_sm_bytes": "sharedMemPerMultiprocessor",
    "smem_per_block_optin_bytes": "sharedMemPerBlockOptin",
    "max_threads_per_sm": "maxThreadsPerMultiprocessor",
    "max_threads_per_block": "maxThreadsPerBlock",
    "warp_size": "warpSize",
    "total_mem_bytes": "totalGlobalMem",
}
# Header keys that name the profiler's version, most specific first: (key, label in traces.tool_version).
TOOL_VERSION_KEYS = (("cupti_version", "cupti"), ("cuda_runtime_version", "cuda runtime"))

_INT32 = 2**31
_INT64 = 2**63

# Bare non-finite numbers as real Kineto versions wrote them (`"memory bandwidth (GB/s)": inf` when a copy took
# 0 us, pytorch/kineto#105), Python's json.dump spellings, and an unquoted N/A, in value position only.
_NONFINITE = re.compile(r"([:\[,]\s*)(?:-?(?:inf|nan|Infinity|NaN)|N/A)(?=\s*[,\]}])")
# A backslash that does not start a JSON escape (Windows paths in call stacks, pytorch/kineto#336).
_STRAY_BACKSLASH = re.compile(r'\\(?!["\\/bfnrtu])')
# A \uXXXX escape of a lone UTF-16 surrogate (Python's json.dump writes them): valid JSON, but no text.
_LONE_SURROGATE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


# ================================================================== reading the file
@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: parsing allocates ~10^5 dicts, which would trigger it many times
    (about a third of the parse time on a 27 MB trace) for no garbage at all."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _gunzip(path: Path, data: bytes, repairs: list[str]) -> bytes:
    """Decompress every gzip member of `data`; zero padding after the last member is ignored, other trailing
    bytes are ignored with a note in `repairs`."""
    out = []
    rest = data
    while True:
        d = zlib.decompressobj(wbits=31)
        try:
            out.append(d.decompress(rest))
            out.append(d.flush())
        except zlib.error as exc:
            raise FormatError(f"{path}: damaged gzip stream ({exc})") from None
        if not d.eof:
            raise FormatError(f"{path}: damaged gzip stream (truncated: it ends before the end-of-stream marker)")
        rest = d.unused_data
        if rest.startswith(GZIP_MAGIC):
            continue
        if rest.strip(b"\x00"):
            repairs.append(f"{len(rest)} bytes after the end of the gzip stream ignored")
        parts = [b for b in out if b]
        return parts[0] if len(parts) == 1 else b"".join(parts)  # no copy of a single member


def load_json(path: Path) -> Any:
    """Read a plain or gzipped (detected by magic bytes) JSON file and parse it.

    Damaged input raises a one-line FormatError starting with the path. Known defects of real Kineto output
    (bare `inf`/`nan`, stray backslashes, control characters in strings, trailing data) are repaired; what was
    repaired is listed under `REPAIRS_KEY` of the returned document when it is a JSON object.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    repairs: list[str] = []
    if data.startswith(GZIP_MAGIC):
        data = _gunzip(path, data, repairs)
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM) :]
    if not data.strip():
        raise FormatError(f"{path}: no JSON data in the file")
    with _gc_paused():
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            doc = _parse_leniently(path, data, repairs)
    if repairs and isinstance(doc, dict):
        doc[REPAIRS_KEY] = repairs
    return doc


def _parse_leniently(path: Path, data: bytes, repairs: list[str]) -> Any:
    """Slow path for files orjson rejects: repair the defects real Kineto files have, else explain the error."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: not valid UTF-8 at byte {exc.start} (JSON traces are UTF-8 text)") from None
    text, n = _NONFINITE.subn(r"\1null", text)
    if n:
        repairs.append(f"{n} bare non-finite or N/A numbers (inf, nan, ...) read as null")
    text, n = _LONE_SURROGATE.subn(r"\\ufffd", text)
    if n:
        repairs.append(f"{n} escaped lone UTF-16 surrogates read as U+FFFD")
    if repairs:
        try:
            return orjson.loads(text)  # the common case: only bare inf/nan were wrong
        except orjson.JSONDecodeError:
            pass
    decoder = json.JSONDecoder(strict=False)  # strict=False: raw control characters inside strings
    start = len(text) - len(text.lstrip())
    try:
        try:
            doc, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            if not exc.msg.startswith("Invalid \\escape"):
                raise
            text, n = _STRAY_BACKSLASH.subn(r"\\\\", text)
            repairs.append(f"{n} backslashes that start no JSON escape read literally")
            doc, end = decoder.raw_decode(text, start)
    except json.JSONDecodeError as exc:
        at = len(text[: exc.pos].encode("utf-8"))
        hint = " (the data ends early: truncated file?)" if not text[exc.pos :].strip() else ""
        raise FormatError(f"{path}: not valid JSON at byte {at}: {exc.msg}{hint}") from None
    except RecursionError:
        raise FormatError(f"{path}: not valid JSON: nested too deeply") from None
    trailing = text[end:].strip()
    if trailing.strip("\x00"):
        repairs.append(f"{len(trailing)} characters after the end of the JSON document ignored")
    return doc


# ================================================================== typed field access
def _i32(v: Any) -> int | None:
    """An INTEGER column value: ints (and integral floats) within int32, else None."""
    if type(v) is float and v.is_integer():
        v = int(v)
    if type(v) is int and -_INT32 <= v < _INT32:
        return v
    return None


def _i64(v: Any) -> int | None:
    """A BIGINT column value: ints (and integral floats) within int64, else None."""
    if type(v) is float and v.is_integer():
        v = int(v)
    if type(v) is int and -_INT64 <= v < _INT64:
        return v
    return None


def _os_id(v: Any) -> int | None:
    """A process/thread id: an int, or a string of digits (2021 traces write CPU tids as "25738"); names such
    as "stream 7" or "Traces" give None."""
    if type(v) is str and v.isdigit():
        v = int(v)
    return _i64(v)


def _stream_of_tid(v: Any) -> int | None:
    """The stream id of a GPU event's tid: 7 (current format) or "stream 7" (2021 format)."""
    if type(v) is str and v.startswith("stream "):
        v = v[7:]
        if v.isdigit():
            return _i64(int(v))
        return None
    return _i64(v)


def _dim3(v: Any) -> tuple[int | None, int | None, int | None]:
    if type(v) is list and len(v) == 3:
        return _i32(v[0]), _i32(v[1]), _i32(v[2])
    return None, None, None


# ================================================================== building the tables
_KERNEL_COLUMNS = (
    "name device_id stream_id start_ns end_ns grid_x grid_y grid_z block_x block_y block_z "
    "registers_per_thread smem_bytes correlation_id"
).split()
_MEMOP_COLUMNS = "kind name device_id stream_id start_ns end_ns bytes correlation_id".split()
_LAUNCH_COLUMNS = "correlation_id name start_ns end_ns process_id thread_id".split()
_RANGE_COLUMNS = "name kind side start_ns end_ns process_id thread_id device_id stream_id".split()


@dataclass
class _Tables:
    """Column lists under construction, and what was skipped (category label -> reason -> count)."""

    kernels: Columns = field(default_factory=lambda: {c: [] for c in _KERNEL_COLUMNS})
    memops: Columns = field(default_factory=lambda: {c: [] for c in _MEMOP_COLUMNS})
    launches: Columns = field(default_factory=lambda: {c: [] for c in _LAUNCH_COLUMNS})
    ranges: Columns = field(default_factory=lambda: {c: [] for c in _RANGE_COLUMNS})
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)


def _span(e: dict[str, Any]) -> tuple[int, int] | str:
    """(start_ns, end_ns) of a complete event, or the reason it has none."""
    ts = e.get("ts")
    dur = e.get("dur")
    if type(ts) not in (int, float) or type(dur) not in (int, float):
        return "missing or non-numeric ts/dur"
    try:
        start = round(ts * 1000)
        d = round(dur * 1000)
    except (OverflowError, ValueError):
        return "non-finite ts/dur"
    if d < 0:
        return "negative duration"
    end = start + d
    if not (-_INT64 <= start and end < _INT64):
        return "timestamp out of range"
    return start, end


def _read_events(events: list[Any], t: _Tables) -> None:
    """One pass over traceEvents, filling `t`; launches are filtered by correlation afterwards."""
    dispatch = _DISPATCH
    skipped = t.skipped
    k, m, la, r = t.kernels, t.memops, t.launches, t.ranges
    not_objects = 0
    for e in events:
        if type(e) is not dict:
            not_objects += 1
            continue
        cat = e.get("cat")
        if type(cat) is not str:
            continue
        what = dispatch.get(cat)
        if what is None:
            continue
        name = e.get("name")
        if what == _STEP_OP and (type(name) is not str or not name.startswith(PROFILER_STEP_PREFIX)):
            continue
        if type(name) is not str:
            skipped[(cat, "missing or non-string name")] += 1
            continue
        span = _span(e)
        if type(span) is str:
            skipped[(cat, span)] += 1
            continue
        start, end = span
        args = e.get("args")
        if type(args) is not dict:
            args = {}
        if what == _KERNEL:
            stream = args.get("stream")
            gx, gy, gz = _dim3(args.get("grid"))
            bx, by, bz = _dim3(args.get("block"))
            k["name"].append(name)
            k["device_id"].append(_i32(args.get("device", e.get("pid"))))
            k["stream_id"].append(_i64(stream) if stream is not None else _stream_of_tid(e.get("tid")))
            k["start_ns"].append(start)
            k["end_ns"].append(end)
            k["grid_x"].append(gx)
            k["grid_y"].append(gy)
            k["grid_z"].append(gz)
            k["block_x"].append(bx)
            k["block_y"].append(by)
            k["block_z"].append(bz)
            k["registers_per_thread"].append(_i32(args.get("registers per thread")))
            k["smem_bytes"].append(_i32(args.get("shared memory")))  # static + dynamic; Kineto gives only the sum
            k["correlation_id"].append(_i64(args.get("correlation")))
        elif what == _MEMOP:
            stream = args.get("stream")
            # peer copies (CUpti_ActivityMemcpy2) name the executing device "inDevice"
            dev = args.get("device", args.get("inDevice", e.get("pid")))
            m["kind"].append(MEMOP_CATS[cat])
            m["name"].append(name)
            m["device_id"].append(_i32(dev))
            m["stream_id"].append(_i64(stream) if stream is not None else _stream_of_tid(e.get("tid")))
            m["start_ns"].append(start)
            m["end_ns"].append(end)
            m["bytes"].append(_i64(args.get("bytes")))
            m["correlation_id"].append(_i64(args.get("correlation")))
        elif what == _LAUNCH:
            corr = _i64(args.get("correlation"))
            if corr is None:
                continue
            la["correlation_id"].append(corr)
            la["name"].append(name)
            la["start_ns"].append(start)
            la["end_ns"].append(end)
            la["process_id"].append(_os_id(e.get("pid")))
            la["thread_id"].append(_os_id(e.get("tid")))
        else:
            kind, side = ("profiler_step", "cpu") if what == _STEP_OP else RANGE_CATS[cat]
            if side == "cpu" and name.startswith(PROFILER_STEP_PREFIX):
                kind = "profiler_step"
            r["name"].append(name)
            r["kind"].append(kind)
            r["side"].append(side)
            r["start_ns"].append(start)
            r["end_ns"].append(end)
            if side == "cpu":
                r["process_id"].append(_os_id(e.get("pid")))
                r["thread_id"].append(_os_id(e.get("tid")))
                r["device_id"].append(None)
                r["stream_id"].append(None)
            else:
                dev = args.get("device", e.get("pid"))
                stream = args.get("stream")
                r["process_id"].append(None)
                r["thread_id"].append(None)
                r["device_id"].append(_i32(dev))
                r["stream_id"].append(_i64(stream) if stream is not None else _stream_of_tid(e.get("tid")))
    if not_objects:
        skipped[("traceEvents", "not a JSON object")] += not_objects


def _keep_launches_of_gpu_work(t: _Tables) -> None:
    """Keep only the host API calls whose correlation id matches a kernel or memory operation."""
    gpu = set(t.kernels["correlation_id"])
    gpu.update(t.memops["correlation_id"])
    la = t.launches
    keep = [i for i, c in enumerate(la["correlation_id"]) if c in gpu]
    if len(keep) != len(la["correlation_id"]):
        t.launches = {c: [col[i] for i in keep] for c, col in la.items()}


def _devices(props: Any, warnings: list[str]) -> Columns | None:
    """The devices table from the header's deviceProperties (a list of objects with an integer `id`)."""
    if props is None:
        return None
    if type(props) is not list:
        warnings.append("deviceProperties is not a list; no device properties read")
        return None
    cols: Columns = {"device_id": [], **{c: [] for c in DEVICE_PROPERTIES}}
    seen: set[int] = set()
    bad = 0
    for p in props:
        dev = _i32(p.get("id")) if type(p) is dict else None
        if dev is None or dev in seen:
            bad += 1
            continue
        seen.add(dev)
        cols["device_id"].append(dev)
        for col, key in DEVICE_PROPERTIES.items():
            v = p.get(key)
            if col == "name":
                cols[col].append(v if type(v) is str else None)
            elif col.endswith("_bytes"):
                cols[col].append(_i64(v))
            else:
                cols[col].append(_i32(v))
    if bad:
        warnings.append(f"{bad} deviceProperties entries skipped: not an object with a new integer id")
    return cols


def _tool_version(doc: dict[str, Any]) -> str | None:
    for key, label in TOOL_VERSION_KEYS:
        v = doc.get(key)
        if type(v) in (int, str):
            return f"{label} {v}"
    return None


def from_document(doc: dict[str, Any], path: Path) -> Ingest:
    """Turn a parsed Kineto trace (a JSON object with `traceEvents`) into the normalized tables: devices (from
    deviceProperties), kernels, memops, launches (host calls that launched them) and ranges (record_function
    annotations, ProfilerStep#N, and their GPU projections). Unusable events are skipped and counted in
    `Ingest.warnings`, never fatal."""
    events = doc.get("traceEvents")
    if type(events) is not list:
        raise FormatError(f"{path}: traceEvents is not a list of events")
    version = doc.get("schemaVersion")
    ingest = Ingest(
        format="kineto",
        format_version=str(version) if type(version) in (int, str) else None,
        tool_version=_tool_version(doc),
    )
    warnings = ingest.warnings
    repairs = doc.get(REPAIRS_KEY)
    if type(repairs) is list:
        warnings.extend(f"repaired JSON: {r}" for r in repairs)
    devices = _devices(doc.get("deviceProperties"), warnings)
    t = _Tables()
    _read_events(events, t)
    _keep_launches_of_gpu_work(t)
    for (cat, reason), n in sorted(t.skipped.items()):
        what = "traceEvents entries" if cat == "traceEvents" else f"'{cat}' events"
        warnings.append(f"{n} {what} skipped: {reason}")
    if not t.kernels["name"] and not t.memops["name"]:
        warnings.append("no GPU kernels or memory operations in the trace (profiled without ProfilerActivity.CUDA?)")
    tables = {"devices": devices, "kernels": t.kernels, "memops": t.memops, "launches": t.launches, "ranges": t.ranges}
    ingest.tables = {name: cols for name, cols in tables.items() if cols and next(iter(cols.values()))}
    return ingest
