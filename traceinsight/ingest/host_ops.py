"""Host operations (torch.profiler CPU ops) of a Kineto trace within given time windows, read on demand.

The tables keep no CPU op: a decode loop records ten or more per kernel, and reading them would cost a third of
the ingest time of every trace (they are recognised by their first bytes and never parsed, see `kineto.read`).
Only a postmortem that blames the host needs them, and only around a few steps: `read_kineto_ops` streams the
file once more with one regular expression over Kineto's fixed layout (`"ph": "X", "cat": "cpu_op", "name":
..., "pid": ..., "tid": ..., "ts": ..., "dur": ...`) and keeps the ops that overlap the windows. About 0.1 s per
30 MB of JSON; events written in another layout are not seen (the result is evidence, never a table).
Times as the reader gives them: `start_ns = round(ts * 1000)`, `end_ns = start_ns + round(dur * 1000)`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from traceinsight.ingest.json_stream import Repairs, byte_chunks

# Categories read as host operations.
HOST_OP_CATS = (b"cpu_op", b"python_function")
_OP = re.compile(
    rb'"ph": "X", "cat": "(' + b"|".join(HOST_OP_CATS) + rb')", "name": "((?:[^"\\]|\\.)*)", '
    rb'"pid": "?(-?\d+)"?, "tid": "?(-?\d+)"?,\s*"ts": (-?\d+(?:\.\d*)?), "dur": (\d+(?:\.\d*)?)'
)
# Bytes of text kept from one chunk to the next (an event cut by the chunk boundary is read whole next time).
_CARRY = b'"ph"'


class HostOp(NamedTuple):
    name: str
    category: str
    start_ns: int
    end_ns: int
    process_id: int
    thread_id: int

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


def _unescape(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    if "\\" in text:
        try:
            import json

            return str(json.loads(f'"{text}"'))
        except ValueError:
            return text
    return text


def read_kineto_ops(path: Path, windows: Sequence[tuple[int, int]], min_dur_ns: int = 0) -> list[HostOp]:
    """The host ops of the Kineto trace at `path` that overlap any of `windows` ([start, end) in ns) and last at
    least `min_dur_ns`, in file order."""
    if not windows:
        return []
    merged: list[list[int]] = []
    for lo, hi in sorted(windows):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    starts = [w[0] for w in merged]
    ends = [w[1] for w in merged]
    first, last = starts[0], max(ends)
    out: list[HostOp] = []
    names: dict[bytes, str] = {}
    carry = b""
    for chunk in byte_chunks(path, Repairs(), cut_ok=True):
        buf = carry + chunk
        cut = buf.rfind(_CARRY)
        body, carry = (buf[:cut], buf[cut:]) if cut > 0 else (buf, b"")
        for m in _OP.finditer(body):
            start = round(float(m.group(5)) * 1000)
            dur = round(float(m.group(6)) * 1000)
            end = start + dur
            if dur < min_dur_ns or end <= first or start >= last:
                continue
            i = bisect.bisect_left(starts, end) - 1  # the last window starting before the op ends
            if i < 0 or ends[i] <= start:  # (the windows are disjoint and sorted: no earlier one reaches it)
                continue
            raw = m.group(2)
            name = names.get(raw)
            if name is None:
                name = names[raw] = _unescape(raw)
            out.append(HostOp(name, m.group(1).decode(), start, end, int(m.group(3)), int(m.group(4))))
    if carry:
        for m in _OP.finditer(carry):  # the last event of the file
            start = round(float(m.group(5)) * 1000)
            end = start + round(float(m.group(6)) * 1000)
            if end - start >= min_dur_ns and any(lo < end and start < hi for lo, hi in merged):
                out.append(HostOp(_unescape(m.group(2)), m.group(1).decode(), start, end, int(m.group(3)),
                                  int(m.group(4))))
    return out
