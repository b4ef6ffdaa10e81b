"""Host operations (torch.profiler CPU ops and Python functions) of a Kineto trace, read at ingest into the
`host_ops` table (what the host did while the GPU waited: diagnose/host.py reads them through
queries/host_ops.sql).

A decode loop records ten or more per kernel, and parsing them as JSON (their `args` hold every input's shape)
would cost a third of the ingest time of every trace. The streaming reader (`kineto.read`) never parses them:
`HostOps.scan` reads each batch's ops with numpy from its elements' positions (host_ops_scan), else runs one
regular expression over the batch's bytes, on Kineto's layout of these events (`"ph":
"X", "cat": "cpu_op", "name": ..., "pid": ..., "tid": ..., "ts": ..., "dur": ...`, the pairs in this order) and
turns each batch's matches into numpy columns at once (no Python object per op is kept). Events written in
another order are not seen by the streaming reader; a document parsed whole (`kineto.from_document`) gives its
events through `HostOps.add_events`. Times as the other tables: `start_ns = round(ts * 1000)`, `end_ns = start_ns +
round(dur * 1000)`.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from typing import Any, NamedTuple

import numpy as np

from traceinsight.ingest import host_ops_scan
from traceinsight.ingest.base import Columns

# Categories read as host operations.
HOST_OP_CATS = ("cpu_op", "python_function")
_CATS = tuple(c.encode() for c in HOST_OP_CATS)
# Searched from the `X` of `"ph": "X"` (a rare byte: the search runs fast until it) and checked behind it; the
# pairs in Kineto's order, with any whitespace around their `:` and `,` that json.dump writes (Kineto writes `, `
# and `,\n    `, pretty-printers one pair a line, compact JSON none).
_NUMBER = rb"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"
_OP = re.compile(
    rb'X"(?:(?<="ph": "X")|(?<="ph":"X")),\s*"cat":\s*"(' + b"|".join(c.encode() for c in HOST_OP_CATS) + rb')",\s*'
    rb'"name":\s*"([^"\\]*(?:\\.[^"\\]*)*)",\s*"pid":\s*"?(-?\d+)"?,\s*"tid":\s*"?(-?\d+)"?,\s*'
    rb'"ts":\s*(' + _NUMBER + rb'),\s*"dur":\s*(' + _NUMBER + rb")"
)
_INT_TEXT = re.compile(r"-?\d+")
_INT64 = 2**63


class HostOp(NamedTuple):
    """One host operation or CPU range (as queries/host_ops.sql returns them)."""

    name: str
    category: str
    start_ns: int
    end_ns: int
    process_id: int | None
    thread_id: int | None

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


def _unescape(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    if "\\" in text:
        import json

        try:
            return str(json.loads(f'"{text}"'))
        except ValueError:
            return text
    return text


def _number_column(texts: tuple[bytes, ...]) -> np.ndarray:
    """The numbers written by `texts` (each a match of _NUMBER) as float64, the same doubles as `float` reads.

    Where all are plain decimals (`-?digits[.digits]`, their digits as an integer m below 2**53) numpy reads them
    a byte column at a time over all texts at once (the texts as a fixed-width array, one row each: m by
    Horner's rule, k the digits after the point) as m / 10**k: both exact in float64, so the one correctly rounded
    division gives the double that strtod reads. Otherwise (an exponent, more digits) `float` reads each."""
    n = len(texts)
    a = np.array(texts)
    if a.dtype.kind == "S" and a.dtype.itemsize <= 24 and n:
        cols = a.view(np.uint8).reshape(n, a.dtype.itemsize).T.copy()  # column j: the j-th byte of every text
        m = np.zeros(n, np.int64)
        digits = np.zeros(n, np.int64)
        frac = np.zeros(n, np.int64)
        seen_dot = np.zeros(n, bool)
        neg = cols[0] == ord("-")
        bad = np.zeros(n, bool)
        for j, c in enumerate(cols):
            d = c - np.uint8(48)
            digit = d <= 9
            m = np.where(digit, m * 10 + d, m)
            digits += digit
            frac += digit & seen_dot
            dot = c == ord(".")
            bad |= (dot & seen_dot) | ~(digit | dot | (c == 0) | (neg if j == 0 else False))
            seen_dot |= dot
        if not (bad.any() or (digits == 0).any() or (digits > 16).any() or (m >= 2**53).any()):
            values = m.astype(np.float64) / 10.0**frac
            return np.where(neg, -values, values)
    return np.array([float(t) for t in texts], np.float64)


def _ns(us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """round(us * 1000) as int64 (round half to even, as Python's `round`), and where that is a finite int64."""
    ns = np.rint(us * 1000)
    ok = np.isfinite(ns) & (np.abs(ns) < 2.0**62)
    return np.where(ok, ns, 0).astype(np.int64), ok


class HostOps:
    """The host_ops rows under construction: per batch, numpy columns and names numbered in first-seen order."""

    def __init__(self) -> None:
        # name (the raw JSON text of a scanned op, or the text of a parsed one) -> its number
        self.index: defaultdict[bytes | str, int] = defaultdict(itertools.count().__next__)
        self.parts: list[tuple[np.ndarray, ...]] = []  # (name, category, start_ns, end_ns, process_id, thread_id)

    def __len__(self) -> int:
        return sum(len(p[0]) for p in self.parts)

    def __getstate__(self) -> tuple[list[bytes | str], list[tuple[np.ndarray, ...]]]:  # to and from workers
        return list(self.index), self.parts

    def __setstate__(self, state: tuple[list[bytes | str], list[tuple[np.ndarray, ...]]]) -> None:
        self.__init__()  # type: ignore[misc]
        words, self.parts = state
        for w in words:
            self.index[w]

    def scan(self, data: bytes, sep: bytes | None = None, braces: Any = None) -> None:
        """Add the host operations written in `data` (whole events of a Kineto traceEvents array; `sep` and
        `braces` as the stream's `Batch` gives them: numpy reads the ops from the elements' positions, see
        host_ops_scan; else, or where it cannot decide, the regular expression)."""
        fast = host_ops_scan.read(data, sep, braces, _CATS, _OP)
        if fast is not None:
            cat, name_start, name_end, pid, tid, ts, dur_us = fast
            if len(cat):
                groups = host_ops_scan.name_groups(data, name_start, name_end)
                if groups is None:
                    names = [data[s:e] for s, e in zip(name_start.tolist(), name_end.tolist(), strict=True)]
                    ids = np.fromiter(map(self.index.__getitem__, names), np.int32, len(cat))
                else:  # one Python step per distinct name, in order of first occurrence: numbered as above
                    first, group = groups
                    firsts = [data[s:e] for s, e in zip(name_start[first].tolist(), name_end[first].tolist(),
                                                          strict=True)]
                    ids = np.fromiter(map(self.index.__getitem__, firsts), np.int32, len(firsts))[group]
                self._add_numbers(ids, cat, pid, tid, ts, dur_us)
            return
        found = _OP.findall(data)
        if not found:
            return
        n = len(found)
        cats, op_names, *numbers = zip(*found, strict=True)
        cat_code = {c: i for i, c in enumerate(_CATS)}
        self._add_numbers(np.fromiter(map(self.index.__getitem__, op_names), np.int32, n),
                          np.fromiter(map(cat_code.__getitem__, cats), np.int8, n), *map(_number_column, numbers))

    def _add_numbers(self, names: np.ndarray, cats: np.ndarray, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray,
                     dur_us: np.ndarray) -> None:
        """Add scanned ops, their numbers as read (float64)."""
        pids, tids = pid.astype(np.int64), tid.astype(np.int64)
        start, ok = _ns(ts)
        dur, ok_dur = _ns(dur_us)
        exact = (np.abs(pid) < 2.0**53) & (np.abs(tid) < 2.0**53)  # ids beyond: dropped (no trace writes them)
        self._add(names, cats, start, start + dur, pids, tids, ok & ok_dur & (dur >= 0) & exact)

    def add_events(self, events: list[Any]) -> None:
        """Add the host operations among parsed traceEvents (complete events of HOST_OP_CATS with a name, numeric
        ts and dur >= 0, and integer pid and tid, as `scan` reads them)."""
        rows = []
        for e in events:
            if type(e) is not dict or e.get("ph") != "X" or e.get("cat") not in HOST_OP_CATS:
                continue
            name, ts, dur = e.get("name"), e.get("ts"), e.get("dur")
            pid, tid = _id(e.get("pid")), _id(e.get("tid"))
            if (type(name) is str and (type(ts) is int or type(ts) is float)
                    and (type(dur) is int or type(dur) is float) and dur >= 0 and pid is not None and tid is not None):
                rows.append((name, HOST_OP_CATS.index(e["cat"]), ts, dur, pid, tid))
        if not rows:
            return
        n = len(rows)
        names, cats, ts, durs, pids, tids = zip(*rows, strict=True)
        start, ok = _ns(np.array(ts, np.float64))
        dur_ns, ok_dur = _ns(np.array(durs, np.float64))
        self._add(np.fromiter(map(self.index.__getitem__, names), np.int32, n), np.array(cats, np.int8), start,
                  start + dur_ns, np.array(pids, np.int64), np.array(tids, np.int64), ok & ok_dur)

    def _add(self, names: np.ndarray, cats: np.ndarray, start: np.ndarray, end: np.ndarray, pids: np.ndarray,
             tids: np.ndarray, ok: np.ndarray) -> None:
        ok &= (pids != -_INT64) & (tids != -_INT64)
        part = (names, cats, start, end, pids, tids)
        self.parts.append(part if ok.all() else tuple(c[ok] for c in part))

    def extend(self, other: HostOps) -> None:
        """Append the rows of `other` (a worker's), its names renumbered into this one's."""
        if not other.parts:
            return
        words = list(other.index)
        remap = np.fromiter(map(self.index.__getitem__, words), np.int32, len(words))
        for names, *rest in other.parts:
            self.parts.append((remap[names], *rest))

    def columns(self) -> Columns | None:
        """The host_ops columns (op_id in file order), as Arrow arrays; None when there is no row."""
        if not self.parts:
            return None
        from traceinsight.ingest.arrow_numpy import dictionary_array, int64_array

        names, cats, start, end, pids, tids = (np.concatenate(c) for c in zip(*self.parts, strict=True))
        words = [w if isinstance(w, str) else _unescape(w) for w in self.index]
        return {
            "op_id": int64_array(np.arange(len(names), dtype=np.int64)),
            "name": dictionary_array(words, names),
            "category": dictionary_array(list(HOST_OP_CATS), cats.astype(np.int32)),
            "start_ns": int64_array(start),
            "end_ns": int64_array(end),
            "process_id": int64_array(pids),
            "thread_id": int64_array(tids),
        }


def _id(v: Any) -> int | None:
    """A pid or tid as the scan reads it: an integer, or one written as a string ("596")."""
    if type(v) is str and _INT_TEXT.fullmatch(v):
        v = int(v)
    return v if type(v) is int and -_INT64 < v < _INT64 else None
