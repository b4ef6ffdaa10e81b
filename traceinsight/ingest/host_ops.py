"""Host operations (torch.profiler CPU ops and Python functions) of a Kineto trace, read at ingest into the
`host_ops` table (what the host did while the GPU waited: diagnose/host.py reads them through
queries/host_ops.sql).

A decode loop records ten or more per kernel, and parsing them as JSON (their `args` hold every input's shape)
would cost a third of the ingest time of every trace. The streaming reader (`kineto.read`) never parses them:
`HostOps.scan` runs one regular expression over each batch's bytes, on Kineto's layout of these events (`"ph":
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

from traceinsight.ingest.base import Columns

# Categories read as host operations.
HOST_OP_CATS = ("cpu_op", "python_function")
# Searched from the `X` of `"ph": "X"` (a rare byte: the search runs fast until it) and checked behind it; the
# pairs in Kineto's order, with any whitespace around their `:` and `,` that json.dump writes (Kineto writes `, `
# and `,\n    `, pretty-printers one pair a line, compact JSON none).
_NUMBER = rb"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"
_OP = re.compile(
    rb'X"(?:(?<="ph": "X")|(?<="ph":"X")),\s*"cat":\s*"(' + b"|".join(c.encode() for c in HOST_OP_CATS) + rb')",\s*'
    rb'"name":\s*"([^"\\]*(?:\\.[^"\\]*)*)",(\s*"pid":\s*"?-?\d+"?,\s*"tid":\s*"?-?\d+"?,\s*'
    rb'"ts":\s*' + _NUMBER + rb',\s*"dur":\s*' + _NUMBER + rb")"
)
# The third group's four numbers (pid, tid, ts, dur), each read alone where they cannot be read at once.
_NUMBERS = re.compile(_NUMBER)
# Bytes that write a number, kept by `translate`; every other byte of the third group (the keys, quotes,
# whitespace) becomes a space.
_NUMBERS_ONLY = bytes(c if chr(c) in "0123456789.-+eE" else 32 for c in range(256))
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


def _numbers(texts: tuple[bytes, ...], n: int) -> np.ndarray:
    """The four numbers of each op's third group, as an (n, 4) float64 array: all read at once by numpy's
    strtod (correctly rounded, as `float`), else (an odd byte between them) each op's alone."""
    try:
        values = np.fromstring(b" ".join(texts).translate(_NUMBERS_ONLY), sep=" ")
    except ValueError:
        values = np.zeros(0)
    if len(values) != 4 * n:
        values = np.array([[float(x) for x in _NUMBERS.findall(t)[:4]] for t in texts], np.float64)
    return values.reshape(n, 4)


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

    def scan(self, data: bytes) -> None:
        """Add the host operations written in `data` (whole events of a Kineto traceEvents array)."""
        found = _OP.findall(data)
        if not found:
            return
        n = len(found)
        cats, names, numbers = zip(*found, strict=True)
        values = _numbers(numbers, n)
        pids, tids = values[:, 0].astype(np.int64), values[:, 1].astype(np.int64)
        start, ok = _ns(values[:, 2])
        dur, ok_dur = _ns(values[:, 3])
        exact = (np.abs(values[:, :2]) < 2.0**53).all(axis=1)  # ids beyond: dropped (no trace writes them)
        cat_code = {c.encode(): i for i, c in enumerate(HOST_OP_CATS)}
        self._add(np.fromiter(map(self.index.__getitem__, names), np.int32, n),
                  np.fromiter(map(cat_code.__getitem__, cats), np.int8, n), start, start + dur, pids, tids,
                  ok & ok_dur & (dur >= 0) & exact)

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
