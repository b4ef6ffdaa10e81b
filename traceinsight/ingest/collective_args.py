"""What torch.distributed wrote on each collective kernel of a Kineto trace, kept at ingest in the `collectives`
table (model/ranks.py reads it through queries/collective_args.sql).

PyTorch (2.1 and later) copies the arguments of the collective's `record_param_comms` op onto its NCCL kernel
event: `"Collective name": "allreduce", "In msg nelems": 6637568, "Out msg nelems": ..., "Group size": 2,
"dtype": "Float", "Process Group Name": "0", "Process Group Description": "default_pg", "Process Group Ranks":
"[0, 1]"` and, in newer releases, `"Seq"` (the collective's sequence number in its group). The Kineto reader
parses every kernel's `args` anyway: `add` keeps those of a kernel whose args hold a "Collective name" and an
integer "correlation", one row per kernel (a multi-rank run matches the n-th collective of a group on every rank
with them).
"""

from __future__ import annotations

from typing import Any, NamedTuple

# collectives column -> the kernel args key it is read from, and whether it is an integer (else a text).
COLUMNS: dict[str, tuple[str, bool]] = {
    "name": ("Collective name", False),
    "in_nelems": ("In msg nelems", True),
    "out_nelems": ("Out msg nelems", True),
    "group_size": ("Group size", True),
    "dtype": ("dtype", False),
    "group_name": ("Process Group Name", False),
    "group_desc": ("Process Group Description", False),
    "group_ranks": ("Process Group Ranks", False),
    "seq": ("Seq", True),
}
# The args key that marks a collective kernel.
KEY = "Collective name"
_INT32 = 2**31
_INT64 = 2**63


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
    return v if type(v) is int and -_INT64 <= v < _INT64 else None


def _str(v: object) -> str | None:
    return v if isinstance(v, str) and v else None


def empty() -> dict[str, list[Any]]:
    """The collectives columns, no row yet."""
    return {"correlation_id": [], **{c: [] for c in COLUMNS}}


def add(cols: dict[str, list[Any]], args: dict[str, Any]) -> None:
    """Append the row of a kernel whose `args` hold KEY (none when its correlation id is not an integer)."""
    corr = _int(args.get("correlation"))
    if corr is None:
        return
    cols["correlation_id"].append(corr)
    for col, (key, integer) in COLUMNS.items():
        v = args.get(key)
        if integer:
            v = _int(v)
            if col == "group_size" and v is not None and not -_INT32 <= v < _INT32:
                v = None
        cols[col].append(v if integer else _str(v))
