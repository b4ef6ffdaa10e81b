"""CUDA graph replays of an Nsight Systems export: the graph-launching host calls, the kernels they replayed and
the graph-level records of `--cuda-graph-trace=graph` captures."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceinsight.ingest.arrow_numpy import int64_array, string_array
from traceinsight.ingest.base import Columns, Ingest
from traceinsight.ingest.graphs import GraphRecord, HostCall, Work, is_graph_launch, replay_columns
from traceinsight.ingest.nsys_export import GRAPH_TRACE_TABLE
from traceinsight.ingest.nsys_query import ExportReader
from traceinsight.ingest.nsys_sql import I32, I64, global_ids


def _as_arrow(values: list[Any] | pa.Array) -> pa.Array:
    """A column as an Arrow array (this reader's are; a list only in a hand-built Ingest)."""
    return values if isinstance(values, pa.Array) else pa.array(values)


def graph_records(reader: ExportReader) -> list[GraphRecord]:
    """The graph-level replay records (CUPTI_ACTIVITY_KIND_GRAPH_TRACE), when the capture made them."""
    t = GRAPH_TRACE_TABLE
    if t not in reader.tables:
        return []
    if not reader.has_span(t):
        reader.ingest.warnings.append(f"{t} has no start/end columns: graph-level replays not read")
        return []
    spec: dict[str, tuple[str, tuple[int, int] | None]] = {
        "device_id": ("deviceId", I32),
        "stream_id": ("streamId", I64),
        "correlation_id": ("correlationId", I64),
        "graph_id": ("graphId", I64),
        "graph_exec_id": ("graphExecId", I64),
        "_pid": ("globalPid", I64),
    }
    got = reader.fetch_checked(t, spec, "graph replays")
    got["process_id"] = global_ids(got.pop("_pid"))["process_id"]
    rows = {n: v.to_pylist() for n, v in got.items()}
    out = []
    for i in range(len(rows["start_ns"])):
        start, end = rows["start_ns"][i], rows["end_ns"][i]
        dev = rows["device_id"][i]
        out.append(GraphRecord(
            correlation_id=rows["correlation_id"][i],
            process_id=rows["process_id"][i],
            # CUPTI writes 0 for both when it could not time the graph; a device of INT_MAX: started on the host.
            start_ns=None if start == end == 0 else start,
            end_ns=None if start == end == 0 else end,
            device_id=None if dev == I32[1] else dev,
            stream_id=rows["stream_id"][i],
            graph_id=rows["graph_id"][i],
            graph_exec_id=rows["graph_exec_id"][i],
        ))
    return out


def graph_replays(reader: ExportReader) -> None:
    """graph_replays from the graph-launching host calls (launches), the kernels they replayed (their
    correlation id; graphNodeId set with --cuda-graph-trace=node) and the graph-level records (--cuda-graph-trace
    =graph, whose kernels are not in the export: hidden replays). Aggregated with Arrow over the graph kernels
    only; nothing to do in a capture without graphs."""
    tables = reader.ingest.tables
    replays(reader.ingest, tables.get("launches", {}), tables.get("kernels", {}), graph_records(reader))


_CALL_COLUMNS = ("correlation_id", "name", "start_ns", "end_ns", "process_id", "thread_id")
_WORK_COLUMNS = ("process_id", "correlation_id", "start_ns", "end_ns", "device_id", "stream_id", "graph_id")


def _graph_launches(la: dict[str, Any]) -> tuple[dict[str, pa.Array], pa.Array | None]:
    """The launches' columns (names as plain strings where a graph launch is among them) and which rows launch a
    graph (None: none does)."""
    la = {n: _as_arrow(v) for n, v in la.items()}
    if not la or not len(la["correlation_id"]):
        return la, None
    names = la["name"]
    if isinstance(names, pa.DictionaryArray):  # as `launches` reads them: one entry per distinct name
        codes = [i for i, n in enumerate(names.dictionary.to_pylist()) if is_graph_launch(n)]
        mask = pc.is_in(names.indices, value_set=int64_array(np.array(codes)).cast(names.indices.type)) if codes \
            else None
        la["name"] = names.cast(pa.string()) if codes else names
    else:
        found = [n for n in pc.unique(names).to_pylist() if is_graph_launch(n)]
        mask = pc.is_in(names, value_set=string_array(found, len(found)).cast(names.type)) if found else None
    return la, mask


def launch_subset(la: Columns) -> dict[str, pa.Array] | None:
    """The graph-launching rows of a slice of launches (the columns `replays` reads), None when there is none."""
    arrays, mask = _graph_launches(la)
    return None if mask is None else {c: arrays[c].filter(mask) for c in _CALL_COLUMNS}


def _graph_kernels(k: dict[str, pa.Array], corrs: set[int]) -> pa.Array | None:
    """Which kernels a graph replayed (a graph node id, or the correlation id of a graph launch); None: none to
    look for."""
    if not k or not len(k["correlation_id"]) or not (corrs or k["graph_node_id"].null_count < len(k["graph_node_id"])):
        return None
    mask = pc.is_valid(k["graph_node_id"])
    if corrs:
        mask = pc.or_(mask, pc.is_in(k["correlation_id"], value_set=int64_array(np.array(sorted(corrs), np.int64))))
    return mask


def kernel_subset(k: Columns, corrs: set[int]) -> dict[str, pa.Array] | None:
    """The kernels of a slice that a graph replayed (`corrs`: the correlation ids of the graph launches and
    records), with the columns `replays` reads; None when there is none."""
    arrays = {n: _as_arrow(v) for n, v in k.items()}
    mask = _graph_kernels(arrays, corrs)
    if mask is None:
        return None
    return {c: arrays[c].filter(mask) for c in (*_WORK_COLUMNS, "graph_node_id")}


def replays(ingest: Ingest, launches: Columns, kernels: Columns, records: list[GraphRecord]) -> None:
    """`graph_replays` from the launches and kernels (all of them, or the subsets `launch_subset` and
    `kernel_subset` kept) and the graph-level records."""
    calls: dict[tuple[int | None, int], HostCall] = {}
    la, mask = _graph_launches(launches)
    if mask is not None:
        picked = {c: la[c].filter(mask).to_pylist() for c in _CALL_COLUMNS}
        for corr, name, start, end, pid, tid in zip(*picked.values(), strict=True):
            calls.setdefault((pid, corr), HostCall(name, start, end, pid, tid))
    k = {n: _as_arrow(v) for n, v in kernels.items()}
    work: dict[tuple[int | None, int], Work] = {}
    graph_corrs = {c for _, c in calls} | {r.correlation_id for r in records if r.correlation_id is not None}
    kmask = _graph_kernels(k, graph_corrs)
    if kmask is not None:
        picked = {c: k[c].filter(kmask).to_pylist() for c in _WORK_COLUMNS}
        for pid, corr, start, end, dev, stream, graph in zip(*picked.values(), strict=True):
            if corr is None:
                continue
            w = work.get((pid, corr))
            if w is None:
                w = work[(pid, corr)] = Work()
            w.add(start, end, dev, stream, True)
            if graph is not None and graph != 0:
                w.graph_id = graph
    cols = replay_columns(calls, work, records)
    if cols is not None:
        hidden = sum(cols["hidden"])
        if hidden:
            ingest.warnings.append(
                f"{hidden} CUDA graph replays recorded as whole graphs ({GRAPH_TRACE_TABLE}): the kernels inside "
                "them are not in the export; recapture with `nsys profile --cuda-graph-trace=node` to see them")
        ingest.tables["graph_replays"] = cols
