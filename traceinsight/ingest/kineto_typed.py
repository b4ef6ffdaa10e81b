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
    _INT32,
    _INT64,
    _KERNEL,
    _KERNEL_COLUMNS,
    _LAUNCH,
    _LAUNCH_COLUMNS,
    _MEMOP,
    _MEMOP_COLUMNS,
    _RANGE_COLUMNS,
    _STEP_OP,
    FLOW_PHASES,
    MEMOP_CATS,
    PROFILER_STEP_PREFIX,
    RANGE_CATS,
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
    order, attributes in place of `dict.get`. The columns' appends are bound once and the common case of each
    integer column (an int in range) is tested inline before the helper (`_i32`, `_i64`, ...) that decides the
    rest: a kernel's row costs half of `_read_events`'s."""
    dispatch = _DISPATCH
    flows = FLOW_PHASES
    skipped = t.skipped
    intern = t.names.setdefault
    k, m, r = t.kernels, t.memops, t.ranges
    la_corr, la_name, la_start, la_end, la_pid, la_tid = (t.launches[c].append for c in _LAUNCH_COLUMNS)
    (k_name, k_dev, k_stream, k_start, k_end, k_gx, k_gy, k_gz, k_bx, k_by, k_bz, k_regs, k_smem,
     k_corr) = (k[c].append for c in _KERNEL_COLUMNS)
    m_kind, m_name, m_dev, m_stream, m_start, m_end, m_bytes, m_corr = (m[c].append for c in _MEMOP_COLUMNS)
    r_name, r_kind, r_side, r_start, r_end, r_pid, r_tid, r_dev, r_stream = (r[c].append for c in _RANGE_COLUMNS)
    lo, hi = -_INT64, _INT64
    lo32, hi32 = -_INT32, _INT32
    no_args = _NO_ARGS
    args_type = _Args
    unset = UNSET
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
            v = args.device
            if v is unset:
                v = e.pid
            k_dev(v if type(v) is int and lo32 <= v < hi32 else _i32(v))
            v = args.stream
            if type(v) is not int or not lo <= v < hi:
                v = _i64(v) if v is not None else _stream_of_tid(e.tid)
            k_stream(v)
            k_name(intern(name, name))
            k_start(start)
            k_end(end)
            g = args.grid
            if type(g) is list and len(g) == 3:
                x, y, z = g
                k_gx(x if type(x) is int and lo32 <= x < hi32 else _i32(x))
                k_gy(y if type(y) is int and lo32 <= y < hi32 else _i32(y))
                k_gz(z if type(z) is int and lo32 <= z < hi32 else _i32(z))
            else:
                k_gx(None)
                k_gy(None)
                k_gz(None)
            g = args.block
            if type(g) is list and len(g) == 3:
                x, y, z = g
                k_bx(x if type(x) is int and lo32 <= x < hi32 else _i32(x))
                k_by(y if type(y) is int and lo32 <= y < hi32 else _i32(y))
                k_bz(z if type(z) is int and lo32 <= z < hi32 else _i32(z))
            else:
                k_bx(None)
                k_by(None)
                k_bz(None)
            v = args.registers
            k_regs(v if type(v) is int and lo32 <= v < hi32 else _i32(v))
            v = args.smem  # static + dynamic; Kineto gives only the sum
            k_smem(v if type(v) is int and lo32 <= v < hi32 else _i32(v))
            v = args.correlation
            k_corr(v if type(v) is int and lo <= v < hi else _i64(v))
        elif what == _MEMOP:
            # peer copies (CUpti_ActivityMemcpy2) name the executing device "inDevice"
            v = args.device
            if v is unset:
                v = e.pid if args.inDevice is unset else args.inDevice
            m_dev(v if type(v) is int and lo32 <= v < hi32 else _i32(v))
            v = args.stream
            if type(v) is not int or not lo <= v < hi:
                v = _i64(v) if v is not None else _stream_of_tid(e.tid)
            m_stream(v)
            m_kind(MEMOP_CATS[cat])
            m_name(intern(name, name))
            m_start(start)
            m_end(end)
            v = args.nbytes
            m_bytes(v if type(v) is int and lo <= v < hi else _i64(v))
            v = args.correlation
            m_corr(v if type(v) is int and lo <= v < hi else _i64(v))
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
                r_pid(_os_id(e.pid))
                r_tid(_os_id(e.tid))
                r_dev(None)
                r_stream(None)
            else:
                v = args.device
                if v is unset:
                    v = e.pid
                r_pid(None)
                r_tid(None)
                r_dev(_i32(v))
                v = args.stream
                r_stream(_i64(v) if v is not None else _stream_of_tid(e.tid))
