"""The host operations of one batch read with numpy from the positions of its elements (`HostOps.scan`'s fast
path): every element of a Kineto batch starts after a separator, found among the batch's `}` (which the stream
has already located), so Kineto's layout (`{` whitespace `"ph": "X", "cat": "cpu_op", "name": "...", "pid": N,
"tid": N,` whitespace `"ts": T, "dur": D`) is checked and read a byte column at a time over all elements at once
instead of by a regular expression over every byte (the expression took 3.5 us an op, this under 1).

`read` gives up (None: the caller runs the expression) on any element it cannot decide: one not starting with
`"ph": "` after its brace, a host-op category whose pairs are written otherwise, a name holding a backslash,
a number with an exponent or more digits than float64 holds exactly. Where it decides, it reads exactly what the
expression reads, except objects nested inside another event's `args` (the expression also matched those).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

# Kineto's bytes between the pairs, after the `ph` value.
_CAT = b'", "cat": "'
_NAME = b'", "name": "'
_PID = b'", "pid": '
_TID = b', "tid": '
_TS = b'"ts": '
_DUR = b', "dur": '
_WHITESPACE = np.zeros(256, bool)
_WHITESPACE[list(b" \t\n\r")] = True
_MAX_NAME = 4096
# Elements not starting with "ph" searched by the expression, at most (more: the expression reads the batch).
_MAX_ODD = 2000


class _Fail(Exception):
    """An element the fast path cannot decide."""


def element_starts(data: bytes, sep: bytes, braces: Any) -> Any:
    """Where each element of `data` starts (just after its `{`): after the first `{`, and after each separator
    (the `}` of `braces` followed by the rest of `sep`). None where `data` holds no `{`."""
    n = len(data)
    w = len(sep)
    a = np.frombuffer(data, np.uint8)
    anchor = sep.index(b"}")
    pos = braces[(braces >= anchor) & (braces <= n - w + anchor)] - anchor
    want = np.frombuffer(sep, np.uint8)
    for j in range(w):
        if j != anchor:
            pos = pos[a[pos + j] == want[j]]
    first = data.find(b"{")
    if first < 0 or (len(pos) and first >= pos[0]):
        return None
    return np.concatenate(([first + 1], pos + w))


def read(data: bytes, sep: bytes | None, braces: Any, cats: tuple[bytes, ...],
         pattern: re.Pattern[bytes]) -> tuple[Any, ...] | None:
    """(category index int8, name start, name end, pid, tid, ts, dur float64) of the host ops in `data`, in file
    order; None where `read` cannot decide (see the module's docstring). `pattern`: the expression, run over the
    few elements that do not start with `"ph"` (Kineto's metadata events), which must hold no host op."""
    if sep is None or braces is None or b"}" not in sep or len(sep) < 2 or len(data) < 64 or b"\x00" in sep:
        return None
    starts = element_starts(data, sep, braces)
    if starts is None:
        return None
    a = np.frombuffer(data, np.uint8)
    try:
        body = _skip_space(a, starts)
        ph = _matches(a, body, b'"ph": "')
        if not ph.all():
            odd = np.flatnonzero(~ph)
            if len(odd) > _MAX_ODD:
                return None
            ends = np.append(starts[1:], len(data))
            if any(pattern.search(data, s, e) for s, e in zip(starts[odd].tolist(), ends[odd].tolist(), strict=True)):
                return None
        return _read(a, body[ph] + 7, cats)
    except _Fail:
        return None


def _at(a: Any, pos: Any) -> Any:
    return a.take(pos, mode="clip")


def _matches(a: Any, pos: Any, text: bytes) -> Any:
    """Whether `text` follows each position: 8 bytes compared at a time (little-endian words at every offset)."""
    words = np.ndarray((len(a) - 7,), dtype=np.dtype("<u8"), buffer=a, strides=(1,))
    hit = np.ones(len(pos), bool)
    for off in range(0, len(text), 8):
        part = text[off : off + 8]
        mask = (1 << (8 * len(part))) - 1
        got = words[np.minimum(pos + off, len(words) - 1)]
        if len(part) < 8:
            got = got & np.uint64(mask)
        hit &= got == np.uint64(int.from_bytes(part, "little"))
    return hit


def _expect(a: Any, pos: Any, text: bytes) -> Any:
    """`pos` moved past `text`, which must follow every position."""
    if not _matches(a, pos, text).all():
        raise _Fail
    return pos + len(text)


def _skip_space(a: Any, pos: Any) -> Any:
    while True:
        space = _WHITESPACE[_at(a, pos)]
        if not space.any():
            return pos
        pos = pos + space


def _number(a: Any, pos: Any, integer: bool) -> tuple[Any, Any]:
    """The numbers written at `pos` (`-?digits[.digits]`; `integer`: no point) as float64 -- the digits as one
    integer m below 2**53 over 10**k, one correctly rounded division: the double strtod reads -- and where each
    ends. A number written otherwise (exponent, more digits) fails."""
    n = len(pos)
    neg = _at(a, pos) == ord("-")
    pos = pos + neg
    m = np.zeros(n, np.int64)
    digits = np.zeros(n, np.int64)
    whole = np.zeros(n, np.int64)
    seen_dot = np.zeros(n, bool)
    active = np.ones(n, bool)
    while active.any():
        c = _at(a, pos)
        d = c - np.uint8(48)
        digit = active & (d <= 9)
        dot = active & (c == ord(".")) & ~seen_dot & (digits > 0) & (not integer)
        m = np.where(digit, m * 10 + d, m)
        digits += digit
        whole += digit & ~seen_dot
        seen_dot |= dot
        active = digit | dot
        pos = pos + active
        if (digits > 16).any():
            raise _Fail
    if (digits == 0).any() or (m >= 2**53).any() or (_at(a, pos) | 0x20 == ord("e")).any():
        raise _Fail
    values = m.astype(np.float64) / 10.0 ** (digits - whole)
    return np.where(neg, -values, values), pos


def _read(a: Any, body: Any, cats: tuple[bytes, ...]) -> tuple[Any, ...]:
    body = body[_at(a, body) == ord("X")]  # another phase: no host op (the expression wants "X")
    body = _expect(a, body + 1, _CAT)
    cat = np.full(len(body), -1, np.int8)
    for i, name in enumerate(cats):
        cat[_matches(a, body, name + b'"')] = i
    ops = cat >= 0
    cat = cat[ops]
    pos = body[ops] + np.array([len(c) + 1 for c in cats], np.int64)[cat]
    pos = _expect(a, pos, _NAME[1:])
    name_start = pos
    name_end = pos.copy()
    left = np.arange(len(pos))
    for _ in range(_MAX_NAME):
        if not len(left):
            break
        c = _at(a, name_end[left])
        if (c == ord("\\")).any():
            raise _Fail
        more = c != ord('"')
        name_end[left[more]] += 1
        left = left[more]
    else:
        raise _Fail
    pos = _expect(a, name_end, _PID)
    pid, pos = _quoted_int(a, pos)
    pos = _expect(a, pos, _TID)
    tid, pos = _quoted_int(a, pos)
    pos = _expect(a, pos, b",")
    pos = _expect(a, _skip_space(a, pos), _TS)
    ts, pos = _number(a, pos, integer=False)
    pos = _expect(a, pos, _DUR)
    dur, pos = _number(a, pos, integer=False)
    return cat, name_start, name_end, pid, tid, ts, dur


def _quoted_int(a: Any, pos: Any) -> tuple[Any, Any]:
    """An id written as a number or as a string of one (`"596"`)."""
    quoted = _at(a, pos) == ord('"')
    value, pos = _number(a, pos + quoted, integer=True)
    if not (_at(a, pos[quoted]) == ord('"')).all():
        raise _Fail
    return value, pos + quoted


# Longest name told apart by `name_groups` (8-byte words of it compared); longer: None.
_MAX_GROUPED = 64


def name_groups(data: bytes, start: Any, end: Any) -> tuple[Any, Any] | None:
    """The distinct names among data[start:end] without a Python object per op: (the op of each distinct name's
    first occurrence, in file order; each op's number in that list). Names are grouped by a hash of their words
    and length and each group checked word by word against its first member (exact); None where a name is
    longer than _MAX_GROUPED or two names share a hash."""
    a = np.frombuffer(data, np.uint8)
    length = (end - start).astype(np.int64)
    if not len(length) or length.max() > _MAX_GROUPED or len(a) < 8:
        return None
    words_at = np.ndarray((len(a) - 7,), dtype=np.dtype("<u8"), buffer=a, strides=(1,))
    words = []
    h = length.astype(np.uint64)
    for k in range((int(length.max()) + 7) // 8):
        left = np.clip(length - 8 * k, 0, 8)
        mask = np.where(left == 8, np.uint64(2**64 - 1), (np.uint64(1) << (left * 8).astype(np.uint64)) - np.uint64(1))
        w = words_at[np.minimum(start + 8 * k, len(words_at) - 1)] & mask
        words.append(w)
        h = (h * np.uint64(0x9E3779B97F4A7C15)) ^ w
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if not (length[first][inverse] == length).all() or not all((w[first][inverse] == w).all() for w in words):
        return None
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse]
