"""What each Kineto event category becomes (data), and the reader's row loop: parsed traceEvents -> the columns of
the kernels, memops, launches, ranges and collectives tables (`read_events`), each value checked for its column's
type (`i32`, `i64`, ...).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from traceinsight.ingest import collective_args
from traceinsight.ingest.base import Columns
from traceinsight.ingest.host_ops import HostOps

# ---------------------------------------------------------------- what each event category becomes (data)
KERNEL_CATS = frozenset({"kernel", "Kernel"})  # current, 2021
MEMOP_CATS = {"gpu_memcpy": "memcpy", "Memcpy": "memcpy", "gpu_memset": "memset", "Memset": "memset"}
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime"})  # host API calls; kept when they launched GPU work
# category -> (ranges.kind, ranges.side)
RANGE_CATS = {"user_annotation": ("annotation", "cpu"), "gpu_user_annotation": ("gpu_annotation", "gpu")}
# Operator categories that carry the profiler's step ranges in traces without `user_annotation` (2021 format).
STEP_OP_CATS = frozenset({"Operator", "cpu_op"})
PROFILER_STEP_PREFIX = "ProfilerStep#"
# Trace Event phases of flow events (arrows between events: no duration, never a kernel or range): skipped.
FLOW_PHASES = frozenset({"s", "t", "f"})
FLOW_PHASES_BYTES = tuple(sorted(p.encode() for p in FLOW_PHASES))

_KERNEL, _MEMOP, _LAUNCH, _RANGE, _STEP_OP = range(5)
DISPATCH: dict[str, int] = {
    **dict.fromkeys(KERNEL_CATS, _KERNEL),
    **dict.fromkeys(MEMOP_CATS, _MEMOP),
    **dict.fromkeys(LAUNCH_CATS, _LAUNCH),
    **dict.fromkeys(RANGE_CATS, _RANGE),
    **dict.fromkeys(STEP_OP_CATS, _STEP_OP),
}

_INT32 = 2**31
_INT64 = 2**63


# ================================================================== typed field access
def i32(v: Any) -> int | None:
    """An INTEGER column value: ints (and integral floats) within int32, else None."""
    if type(v) is float and v.is_integer():
        v = int(v)
    if type(v) is int and -_INT32 <= v < _INT32:
        return v
    return None


def i64(v: Any) -> int | None:
    """A BIGINT column value: ints (and integral floats) within int64, else None."""
    if type(v) is float and v.is_integer():
        v = int(v)
    if type(v) is int and -_INT64 <= v < _INT64:
        return v
    return None


def os_id(v: Any) -> int | None:
    """A process/thread id: an int, or a string of digits (2021 traces write CPU tids as "25738"); names such
    as "stream 7" or "Traces" give None."""
    if type(v) is str and v.isdigit():
        v = int(v)
    return i64(v)


def stream_of_tid(v: Any) -> int | None:
    """The stream id of a GPU event's tid: 7 (current format) or "stream 7" (2021 format)."""
    if type(v) is str and v.startswith("stream "):
        v = v[7:]
        if v.isdigit():
            return i64(int(v))
        return None
    return i64(v)


# ================================================================== building the tables
_KERNEL_COLUMNS = (
    "name device_id stream_id start_ns end_ns grid_x grid_y grid_z block_x block_y block_z "
    "registers_per_thread smem_bytes correlation_id"
).split()
_MEMOP_COLUMNS = "kind name device_id stream_id start_ns end_ns bytes correlation_id".split()
LAUNCH_COLUMNS = "correlation_id name start_ns end_ns process_id thread_id".split()
_RANGE_COLUMNS = "name kind side start_ns end_ns process_id thread_id device_id stream_id".split()


@dataclass
class Tables:
    """Column lists under construction, and what was skipped (category label -> reason -> count)."""

    kernels: Columns = field(default_factory=lambda: {c: [] for c in _KERNEL_COLUMNS})
    memops: Columns = field(default_factory=lambda: {c: [] for c in _MEMOP_COLUMNS})
    launches: Columns = field(default_factory=lambda: {c: [] for c in LAUNCH_COLUMNS})
    ranges: Columns = field(default_factory=lambda: {c: [] for c in _RANGE_COLUMNS})
    collectives: Columns = field(default_factory=collective_args.empty)
    host_ops: HostOps = field(default_factory=HostOps)
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)
    names: dict[str, str] = field(default_factory=dict)  # each distinct name once (memory)


def read_events(events: list[Any], t: Tables) -> None:
    """One pass over traceEvents, filling `t`; launches are filtered by correlation afterwards.

    The hot loop of the reader (10^5-10^6 events per run): checks are inlined (`_span` spelled out), the columns'
    appends bound once, and the common case of each integer column (an int in range) is tested inline before the
    helper (`i32`, `i64`, ...) that decides the rest (a kernel's row: 4.5 us instead of 7.2 with the helpers
    called); repeated names are stored once (`t.names`)."""
    dispatch = DISPATCH
    flows = FLOW_PHASES
    skipped = t.skipped
    intern = t.names.setdefault
    k, m, r, coll = t.kernels, t.memops, t.ranges, t.collectives
    collective, coll_key = collective_args.add, collective_args.KEY
    la_corr, la_name, la_start, la_end, la_pid, la_tid = (t.launches[c].append for c in LAUNCH_COLUMNS)
    (k_name, k_dev, k_stream, k_start, k_end, k_gx, k_gy, k_gz, k_bx, k_by, k_bz, k_regs, k_smem,
     k_corr) = (k[c].append for c in _KERNEL_COLUMNS)
    m_kind, m_name, m_dev, m_stream, m_start, m_end, m_bytes, m_corr = (m[c].append for c in _MEMOP_COLUMNS)
    r_name, r_kind, r_side, r_start, r_end, r_pid, r_tid, r_dev, r_stream = (r[c].append for c in _RANGE_COLUMNS)
    lo, hi = -_INT64, _INT64
    lo32, hi32 = -_INT32, _INT32
    empty: dict[str, Any] = {}
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
        ph = e.get("ph")
        if type(ph) is str and ph in flows:
            continue
        name = e.get("name")
        if type(name) is not str:
            if what != _STEP_OP:
                skipped[(cat, "missing or non-string name")] += 1
            continue
        if what == _STEP_OP and not name.startswith(PROFILER_STEP_PREFIX):
            continue
        # _span, inlined
        ts = e.get("ts")
        dur = e.get("dur")
        if (type(ts) is not float and type(ts) is not int) or (type(dur) is not float and type(dur) is not int):
            skipped[(cat, "missing or non-numeric ts/dur")] += 1
            continue
        try:
            start = round(ts * 1000)
            end = round(dur * 1000)
        except (OverflowError, ValueError):
            skipped[(cat, "non-finite ts/dur")] += 1
            continue
        if end < 0:
            skipped[(cat, "negative duration")] += 1
            continue
        end += start
        if start < lo or end >= hi:
            skipped[(cat, "timestamp out of range")] += 1
            continue
        args = e.get("args")
        if type(args) is not dict:
            args = empty
        if what == _LAUNCH:
            corr = args.get("correlation")
            if type(corr) is not int or not lo <= corr < hi:
                corr = i64(corr)
                if corr is None:
                    continue
            pid, tid = e.get("pid"), e.get("tid")
            la_corr(corr)
            la_name(intern(name, name))
            la_start(start)
            la_end(end)
            la_pid(pid if type(pid) is int and lo <= pid < hi else os_id(pid))
            la_tid(tid if type(tid) is int and lo <= tid < hi else os_id(tid))
        elif what == _KERNEL:
            v = args.get("device", e.get("pid"))
            k_dev(v if type(v) is int and lo32 <= v < hi32 else i32(v))
            v = args.get("stream")
            if type(v) is not int or not lo <= v < hi:
                v = i64(v) if v is not None else stream_of_tid(e.get("tid"))
            k_stream(v)
            k_name(intern(name, name))
            k_start(start)
            k_end(end)
            g = args.get("grid")
            if type(g) is list and len(g) == 3:
                x, y, z = g
                k_gx(x if type(x) is int and lo32 <= x < hi32 else i32(x))
                k_gy(y if type(y) is int and lo32 <= y < hi32 else i32(y))
                k_gz(z if type(z) is int and lo32 <= z < hi32 else i32(z))
            else:
                k_gx(None)
                k_gy(None)
                k_gz(None)
            g = args.get("block")
            if type(g) is list and len(g) == 3:
                x, y, z = g
                k_bx(x if type(x) is int and lo32 <= x < hi32 else i32(x))
                k_by(y if type(y) is int and lo32 <= y < hi32 else i32(y))
                k_bz(z if type(z) is int and lo32 <= z < hi32 else i32(z))
            else:
                k_bx(None)
                k_by(None)
                k_bz(None)
            v = args.get("registers per thread")
            k_regs(v if type(v) is int and lo32 <= v < hi32 else i32(v))
            v = args.get("shared memory")  # static + dynamic; Kineto gives only the sum
            k_smem(v if type(v) is int and lo32 <= v < hi32 else i32(v))
            v = args.get("correlation")
            k_corr(v if type(v) is int and lo <= v < hi else i64(v))
            if coll_key in args:  # what torch.distributed recorded on a collective's kernel
                collective(coll, args)
        elif what == _MEMOP:
            # peer copies (CUpti_ActivityMemcpy2) name the executing device "inDevice"
            v = args.get("device", args.get("inDevice", e.get("pid")))
            m_dev(v if type(v) is int and lo32 <= v < hi32 else i32(v))
            v = args.get("stream")
            if type(v) is not int or not lo <= v < hi:
                v = i64(v) if v is not None else stream_of_tid(e.get("tid"))
            m_stream(v)
            m_kind(MEMOP_CATS[cat])
            m_name(intern(name, name))
            m_start(start)
            m_end(end)
            v = args.get("bytes")
            m_bytes(v if type(v) is int and lo <= v < hi else i64(v))
            v = args.get("correlation")
            m_corr(v if type(v) is int and lo <= v < hi else i64(v))
        else:
            kind, side = ("profiler_step", "cpu") if what == _STEP_OP else RANGE_CATS[cat]
            if side == "cpu" and name.startswith(PROFILER_STEP_PREFIX):
                kind = "profiler_step"
            r_name(intern(name, name))
            r_kind(kind)
            r_side(side)
            r_start(start)
            r_end(end)
            if side == "cpu":
                r_pid(os_id(e.get("pid")))
                r_tid(os_id(e.get("tid")))
                r_dev(None)
                r_stream(None)
            else:
                v = args.get("stream")
                r_pid(None)
                r_tid(None)
                r_dev(i32(args.get("device", e.get("pid"))))
                r_stream(i64(v) if v is not None else stream_of_tid(e.get("tid")))
    if not_objects:
        skipped[("traceEvents", "not a JSON object")] += not_objects
