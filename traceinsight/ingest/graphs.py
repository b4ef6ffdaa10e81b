"""CUDA / HIP graph replays: the `graph_replays` rows both trace readers build, from what each format records.

A replay is one graph launch. Its host call is a runtime/driver API call named like `cudaGraphLaunch`
(`GRAPH_LAUNCH`); the kernels it replayed carry that call's correlation id (Kineto; Nsight Systems with
`--cuda-graph-trace=node`, where they also carry a graphNodeId); with `--cuda-graph-trace=graph` Nsight Systems
records the replay as one graph-level activity (CUPTI_ACTIVITY_KIND_GRAPH_TRACE: start, end, device, stream,
graphId, graphExecId, correlationId) and none of its kernels: such a replay is `hidden`.

The readers hand `replay_columns` plain Python values per replay (a trace has at most a few replays per step,
so these are short lists); each reader aggregates its own kernels per correlation id the way its columns allow.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from traceinsight.ingest.base import Columns

# Host calls that launch a graph (runtime, driver, HIP; per-thread-stream variants such as cudaGraphLaunch_ptsz).
GRAPH_LAUNCH = re.compile(r"^(?:cuda|cu|hip)GraphLaunch(?:_|$)")

REPLAY_COLUMNS = (
    "replay_id correlation_id name graph_id graph_exec_id start_ns end_ns process_id thread_id device_id "
    "stream_id gpu_start_ns gpu_end_ns kernel_count hidden"
).split()

# (process id or None, correlation id): correlation ids are unique within a process. Kineto's kernel rows do not
# name their process, so its reader keys by correlation id alone (None for the process).
Key = tuple[int | None, int]


def is_graph_launch(name: object) -> bool:
    return isinstance(name, str) and GRAPH_LAUNCH.match(name) is not None


def graph_launch_names(names: Iterable[object]) -> set[str]:
    """The distinct names among `names` that launch a graph."""
    return {n for n in set(names) if is_graph_launch(n)}  # type: ignore[misc]


@dataclass
class HostCall:
    """The host call of a replay (a `launches` row)."""

    name: str
    start_ns: int
    end_ns: int
    process_id: int | None
    thread_id: int | None


@dataclass
class Work:
    """What a replay ran on the GPU as the trace's kernel (and memory operation) rows show it."""

    kernels: int = 0
    start_ns: int | None = None
    end_ns: int | None = None
    devices: set[int | None] = field(default_factory=set)
    streams: set[int | None] = field(default_factory=set)
    graph_id: int | None = None

    def add(self, start: int, end: int, device: int | None, stream: int | None, kernel: bool) -> None:
        self.kernels += kernel
        self.start_ns = start if self.start_ns is None or start < self.start_ns else self.start_ns
        self.end_ns = end if self.end_ns is None or end > self.end_ns else self.end_ns
        self.devices.add(device)
        self.streams.add(stream)


@dataclass
class GraphRecord:
    """A graph-level activity record (CUPTI_ACTIVITY_KIND_GRAPH_TRACE)."""

    correlation_id: int | None
    process_id: int | None
    start_ns: int | None  # None: CUPTI wrote 0/0, timing not collected
    end_ns: int | None
    device_id: int | None
    stream_id: int | None
    graph_id: int | None
    graph_exec_id: int | None


def _one(values: set[int | None]) -> int | None:
    return next(iter(values)) if len(values) == 1 else None


def replay_columns(
    calls: dict[Key, HostCall], work: dict[Key, Work], records: Sequence[GraphRecord] = ()
) -> Columns | None:
    """The graph_replays columns: one row per key of a graph-launching host call, of graph kernels' work, or of a
    graph-level record; numbered in launch order (host start, else GPU start). None when there is none."""
    keys: dict[Key, None] = dict.fromkeys(calls)
    keys.update(dict.fromkeys(work))
    by_key: dict[Key, GraphRecord] = {}
    loose: list[GraphRecord] = []  # records without a correlation id: a replay each
    for r in records:
        if r.correlation_id is None:
            loose.append(r)
        else:
            k = (r.process_id, r.correlation_id)
            by_key.setdefault(k, r)
            keys.setdefault(k, None)
    rows: list[dict[str, Any]] = []
    for k in keys:
        call, w, rec = calls.get(k), work.get(k) or Work(), by_key.get(k)
        row: dict[str, Any] = {
            "correlation_id": k[1],
            "name": call.name if call else None,
            "graph_id": rec.graph_id if rec and rec.graph_id is not None else w.graph_id,
            "graph_exec_id": rec.graph_exec_id if rec else None,
            "start_ns": call.start_ns if call else None,
            "end_ns": call.end_ns if call else None,
            "process_id": call.process_id if call else (rec.process_id if rec else k[0]),
            "thread_id": call.thread_id if call else None,
            "device_id": rec.device_id if rec and rec.device_id is not None else _one(w.devices),
            "stream_id": rec.stream_id if rec and rec.stream_id is not None else _one(w.streams),
            "gpu_start_ns": rec.start_ns if rec and rec.start_ns is not None else w.start_ns,
            "gpu_end_ns": rec.end_ns if rec and rec.end_ns is not None else w.end_ns,
            "kernel_count": w.kernels,
            "hidden": rec is not None and w.kernels == 0,
        }
        rows.append(row)
    for r in loose:
        rows.append({
            "correlation_id": None, "name": None, "graph_id": r.graph_id, "graph_exec_id": r.graph_exec_id,
            "start_ns": None, "end_ns": None, "process_id": r.process_id, "thread_id": None,
            "device_id": r.device_id, "stream_id": r.stream_id, "gpu_start_ns": r.start_ns, "gpu_end_ns": r.end_ns,
            "kernel_count": 0, "hidden": True,
        })
    if not rows:
        return None

    def order(row: dict[str, Any]) -> tuple[int, int, int]:
        first = row["start_ns"] if row["start_ns"] is not None else row["gpu_start_ns"]
        gpu = row["gpu_start_ns"]
        return (first if first is not None else 2**63 - 1, gpu if gpu is not None else 2**63 - 1,
                row["correlation_id"] if row["correlation_id"] is not None else -1)

    rows.sort(key=order)
    for i, row in enumerate(rows):
        row["replay_id"] = i
    return {c: [row[c] for row in rows] for c in REPLAY_COLUMNS}
