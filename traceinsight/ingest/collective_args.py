"""What torch.distributed wrote on each collective kernel of a Kineto trace, read on demand.

PyTorch (2.1 and later) copies the arguments of the collective's `record_param_comms` op onto its NCCL kernel
event: `"Collective name": "allreduce", "In msg nelems": 6637568, "Out msg nelems": ..., "Group size": 2,
"dtype": "Float", "Process Group Name": "0", "Process Group Description": "default_pg", "Process Group Ranks":
"[0, 1]"` and, in newer releases, `"Seq"` (the collective's sequence number in its group). The tables keep none
of it (the kernels table is the same for every format); only a multi-rank run needs it, to match the n-th
collective of a group on every rank. `read_collective_args` streams the file once more and returns, per kernel
correlation id, the arguments of every event whose `args` object holds a "Collective name" and a "correlation"
(kernels; the CPU op holds no correlation). Events written in another layout are not seen: the result is evidence,
never a table.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import orjson

from traceinsight.ingest.json_stream import Repairs, byte_chunks

_KEY = b'"Collective name"'
_ARGS = b'"args"'
# Bytes kept from one chunk to the next: from the last event's start, so an event cut by the boundary is read
# whole with the next chunk.
_CARRY = b'"ph"'
_OPEN = re.compile(rb'"args"\s*:\s*\{')


class CollectiveArgs(NamedTuple):
    """One collective kernel's arguments as torch.distributed recorded them (None where absent)."""

    name: str | None  # 'allreduce', 'allgather_into_tensor_coalesced', 'send', ...
    in_nelems: int | None
    out_nelems: int | None
    group_size: int | None
    dtype: str | None
    group_name: str | None  # the process group's name ('0', or a hash-like id)
    group_desc: str | None  # 'default_pg', 'undefined', ...
    group_ranks: str | None  # '[0, 1]' as written
    seq: int | None  # sequence number of the collective in its group, when the profiler wrote it


def _int(v: object) -> int | None:
    return v if type(v) is int else None


def _str(v: object) -> str | None:
    return v if isinstance(v, str) and v else None


def _args_of(buf: bytes, at: int) -> dict[str, object] | None:
    """The `args` object around offset `at` (a "Collective name" key), parsed; None when it is not one plain
    object (nested braces, cut by the chunk)."""
    lo = buf.rfind(_ARGS, 0, at)
    if lo < 0:
        return None
    m = _OPEN.match(buf, lo)
    if m is None:
        return None
    start = m.end() - 1
    if buf.find(b"{", start + 1, at) >= 0 or buf.find(b"}", start + 1, at) >= 0:
        return None
    end = buf.find(b"}", at)
    if end < 0:
        return None
    try:
        got = orjson.loads(buf[start:end + 1])
    except orjson.JSONDecodeError:
        return None
    return got if isinstance(got, dict) else None


def read_collective_args(path: Path) -> dict[int, CollectiveArgs]:
    """Per kernel correlation id, the collective arguments of the Kineto trace at `path` (empty when the trace
    holds none)."""
    out: dict[int, CollectiveArgs] = {}
    carry = b""
    for chunk in byte_chunks(path, Repairs(), cut_ok=True):
        buf = carry + chunk
        cut = buf.rfind(_CARRY)
        body, carry = (buf[:cut], buf[cut:]) if cut > 0 else (buf, b"")
        _scan(body, out)
    if carry:
        _scan(carry, out)
    return out


def _scan(body: bytes, out: dict[int, CollectiveArgs]) -> None:
    at = body.find(_KEY)
    while at >= 0:
        args = _args_of(body, at)
        if args is not None and (corr := _int(args.get("correlation"))) is not None:
            out[corr] = CollectiveArgs(
                _str(args.get("Collective name")), _int(args.get("In msg nelems")), _int(args.get("Out msg nelems")),
                _int(args.get("Group size")), _str(args.get("dtype")), _str(args.get("Process Group Name")),
                _str(args.get("Process Group Description")), _str(args.get("Process Group Ranks")),
                _int(args.get("Seq")))
        at = body.find(_KEY, at + len(_KEY))
