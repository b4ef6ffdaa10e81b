"""CUDA graph replays of an Nsight Systems export: the graph-launching host calls, the kernels they replayed and
the graph-level records of `--cuda-graph-trace=graph` captures."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

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
    records = graph_records(reader)
    calls: dict[tuple[int | None, int], HostCall] = {}
    la = {n: _as_arrow(v) for n, v in reader.ingest.tables.get("launches", {}).items()}
    if la and len(la["correlation_id"]):
        names = la["name"]
        if isinstance(names, pa.DictionaryArray):  # as `launches` reads them: one entry per distinct name
            codes = [i for i, n in enumerate(names.dictionary.to_pylist()) if is_graph_launch(n)]
            mask = pc.is_in(names.indices, value_set=pa.array(codes, names.indices.type)) if codes else None
            la["name"] = names.cast(pa.string()) if codes else names
        else:
            found = [n for n in pc.unique(names).to_pylist() if is_graph_launch(n)]
            mask = pc.is_in(names, value_set=pa.array(found, names.type)) if found else None
        if mask is not None:
            picked = {c: la[c].filter(mask).to_pylist()
                      for c in ("correlation_id", "name", "start_ns", "end_ns", "process_id", "thread_id")}
            for corr, name, start, end, pid, tid in zip(*picked.values(), strict=True):
                calls.setdefault((pid, corr), HostCall(name, start, end, pid, tid))
    k = {n: _as_arrow(v) for n, v in reader.ingest.tables.get("kernels", {}).items()}
    work: dict[tuple[int | None, int], Work] = {}
    graph_corrs = {c for _, c in calls} | {r.correlation_id for r in records if r.correlation_id is not None}
    if k and len(k["correlation_id"]) and (graph_corrs or k["graph_node_id"].null_count < len(k["graph_node_id"])):
        mask = pc.is_valid(k["graph_node_id"])
        if graph_corrs:
            mask = pc.or_(mask, pc.is_in(k["correlation_id"], value_set=pa.array(sorted(graph_corrs), pa.int64())))
        picked = {c: k[c].filter(mask).to_pylist()
                  for c in ("process_id", "correlation_id", "start_ns", "end_ns", "device_id", "stream_id",
                            "graph_id")}
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
            reader.ingest.warnings.append(
                f"{hidden} CUDA graph replays recorded as whole graphs ({GRAPH_TRACE_TABLE}): the kernels inside "
                "them are not in the export; recapture with `nsys profile --cuda-graph-trace=node` to see them")
        reader.ingest.tables["graph_replays"] = cols
