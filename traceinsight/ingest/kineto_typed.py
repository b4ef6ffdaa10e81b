"""The Kineto reader's fast path: the kept events of a batch decoded by msgspec into small typed structs (only the
fields the tables use), read into the tables by `read_typed`, which gives the rows and skip counts of
`kineto._read_events` on orjson's dicts of the same text.

msgspec builds no dict per event and skips the fields the tables do not use (most of a kernel's `args`), and the
loop reads attributes instead of calling `dict.get`: about half the calling thread's time of orjson plus
`_read_events` (docs/SCALE.md). It is used only where it reads the text exactly as orjson does: `decode` returns
None (the caller then takes the orjson path, errors and repairs included) when msgspec refuses the text, and also
where msgspec would accept text that orjson refuses, found by the checks in `_orjson_reads_alike`:

- invalid UTF-8 (orjson validates the whole text; msgspec only the strings it decodes, not those it skips);
- numbers beyond a double's range (orjson refuses them: infinity; msgspec skips them in the fields it does not
  read and reads integers of any length as Python ints): no digit run of 100 or more, no positive exponent of
  three digits or more. (An integer of more than 64 bits but fewer digits is a Python int from msgspec and a
  float from orjson: either is out of range of every column and of the nanosecond clock, so the rows are the
  same; the tests hold that);
- `\\u` escapes (msgspec matches an escaped key such as `"c\\u0061t"` to no field, orjson to `cat`).

Values both accept are the same (ints as ints, floats correctly rounded, the last of repeated keys); a field
that is missing is told from one that is null where the tables need it (`args.device`: `UNSET`).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET

from traceinsight.ingest.kineto import (
    _DISPATCH,
    _INT64,
    _KERNEL,
    _LAUNCH,
    _LAUNCH_COLUMNS,
    _MEMOP,
    _STEP_OP,
    FLOW_PHASES,
    MEMOP_CATS,
    PROFILER_STEP_PREFIX,
    RANGE_CATS,
    _dim3,
    _i32,
    _i64,
    _os_id,
    _stream_of_tid,
    _Tables,
)

__all__ = ["decode", "read_typed"]


class _Args(msgspec.Struct, gc=False):
    """The `args` keys the tables read. UNSET: the key is absent (`device` and `inDevice` fall back to other keys
    only then); the others read absent as null, as `dict.get` does."""

    device: Any = UNSET
    inDevice: Any = UNSET  # noqa: N815 (Kineto's key)
    stream: Any = None
    grid: Any = None
    block: Any = None
    correlation: Any = None
    registers: Any = msgspec.field(name="registers per thread", default=None)
    smem: Any = msgspec.field(name="shared memory", default=None)
    nbytes: Any = msgspec.field(name="bytes", default=None)


class _Event(msgspec.Struct, gc=False):
    """A trace event's keys the tables read (absent: None, as `dict.get`); `args` anything, an object read as
    `_Args` (anything else is read as no args)."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: _Args | list[Any] | str | int | float | bool | None = None


_DECODER = msgspec.json.Decoder(list[_Event])
_NO_ARGS = _Args()

# Digits as 0 and E as e (with `+` deleted): a run of 100 zeros is a number msgspec may read as a Python int or skip
# where orjson reads a float or refuses it, `0e000` a positive exponent of three digits or more (a double overflows
# only with one or the other).
_NUMBER_SHAPES = bytes.maketrans(b"0123456789E", b"0000000000e")
_LONG_DIGITS = b"0" * 100
_BIG_EXPONENT = b"0e000"


def _orjson_reads_alike(text: bytes) -> bool:
    """False where msgspec might accept `text` that orjson refuses or read a value differently (module doc)."""
    if not text.isascii():
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            return False
    if b"\\" in text and b"\\u" in text:
        return False
    shapes = text.translate(_NUMBER_SHAPES, b"+")
    return _LONG_DIGITS not in shapes and _BIG_EXPONENT not in shapes


def decode(text: bytes, n: int) -> list[_Event] | None:
    """The `n` events of `text` (a JSON array of objects), or None where the orjson path must read it (msgspec
    refuses it, might read it differently, or finds another number of elements)."""
    if not _orjson_reads_alike(text):
        return None
    try:
        events = _DECODER.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    return events if len(events) == n else None


def read_typed(events: list[_Event], t: _Tables) -> None:
    """`kineto._read_events` on typed events (every element is an object here): the same checks in the same
    order, attributes in place of `dict.get`."""
    dispatch = _DISPATCH
    flows = FLOW_PHASES
    skipped = t.skipped
    intern = t.names.setdefault
    k, m, r = t.kernels, t.memops, t.ranges
    la_corr, la_name, la_start, la_end, la_pid, la_tid = (t.launches[c].append for c in _LAUNCH_COLUMNS)
    lo, hi = -_INT64, _INT64
    no_args = _NO_ARGS
    args_type = _Args
    for e in events:
        cat = e.cat
        if type(cat) is not str:
            continue
        what = dispatch.get(cat)
        if what is None:
            continue
        ph = e.ph
        if type(ph) is str and ph in flows:
            continue
        name = e.name
        if type(name) is not str:
            if what != _STEP_OP:
                skipped[(cat, "missing or non-string name")] += 1
            continue
        if what == _STEP_OP and not name.startswith(PROFILER_STEP_PREFIX):
            continue
        ts = e.ts
        dur = e.dur
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
        args = e.args
        if type(args) is not args_type:
            args = no_args
        if what == _LAUNCH:
            corr = args.correlation
            if type(corr) is not int or not lo <= corr < hi:
                corr = _i64(corr)
                if corr is None:
                    continue
            pid, tid = e.pid, e.tid
            la_corr(corr)
            la_name(intern(name, name))
            la_start(start)
            la_end(end)
            la_pid(pid if type(pid) is int and lo <= pid < hi else _os_id(pid))
            la_tid(tid if type(tid) is int and lo <= tid < hi else _os_id(tid))
        elif what == _KERNEL:
            stream = args.stream
            gx, gy, gz = _dim3(args.grid)
            bx, by, bz = _dim3(args.block)
            dev = args.device
            k["name"].append(intern(name, name))
            k["device_id"].append(_i32(e.pid if dev is UNSET else dev))
            k["stream_id"].append(_i64(stream) if stream is not None else _stream_of_tid(e.tid))
            k["start_ns"].append(start)
            k["end_ns"].append(end)
            k["grid_x"].append(gx)
            k["grid_y"].append(gy)
            k["grid_z"].append(gz)
            k["block_x"].append(bx)
            k["block_y"].append(by)
            k["block_z"].append(bz)
            k["registers_per_thread"].append(_i32(args.registers))
            k["smem_bytes"].append(_i32(args.smem))
            k["correlation_id"].append(_i64(args.correlation))
        elif what == _MEMOP:
            stream = args.stream
            dev = args.device
            if dev is UNSET:
                dev = e.pid if args.inDevice is UNSET else args.inDevice
            m["kind"].append(MEMOP_CATS[cat])
            m["name"].append(intern(name, name))
            m["device_id"].append(_i32(dev))
            m["stream_id"].append(_i64(stream) if stream is not None else _stream_of_tid(e.tid))
            m["start_ns"].append(start)
            m["end_ns"].append(end)
            m["bytes"].append(_i64(args.nbytes))
            m["correlation_id"].append(_i64(args.correlation))
        else:
            kind, side = ("profiler_step", "cpu") if what == _STEP_OP else RANGE_CATS[cat]
            if side == "cpu" and name.startswith(PROFILER_STEP_PREFIX):
                kind = "profiler_step"
            r["name"].append(intern(name, name))
            r["kind"].append(kind)
            r["side"].append(side)
            r["start_ns"].append(start)
            r["end_ns"].append(end)
            if side == "cpu":
                r["process_id"].append(_os_id(e.pid))
                r["thread_id"].append(_os_id(e.tid))
                r["device_id"].append(None)
                r["stream_id"].append(None)
            else:
                dev = args.device
                stream = args.stream
                r["process_id"].append(None)
                r["thread_id"].append(None)
                r["device_id"].append(_i32(e.pid if dev is UNSET else dev))
                r["stream_id"].append(_i64(stream) if stream is not None else _stream_of_tid(e.tid))
