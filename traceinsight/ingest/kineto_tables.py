"""The Ingest of a Kineto trace from the rows read (`kineto_events.Tables`) and the document's header keys: devices
(deviceProperties), the run's ranks (distributedInfo), the profiler's version, graph replays, and the warnings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from traceinsight.ingest.base import Columns, Ingest
from traceinsight.ingest.graphs import HostCall, Work, graph_launch_names, replay_columns
from traceinsight.ingest.kineto_events import LAUNCH_COLUMNS, Tables, i32, i64

# devices column -> deviceProperties key (Kineto writes the names of cudaDeviceProp's fields).
DEVICE_PROPERTIES: dict[str, str] = {
    "name": "name",
    "num_sms": "numSms",
    "compute_major": "computeMajor",
    "compute_minor": "computeMinor",
    "regs_per_sm": "regsPerMultiprocessor",
    "regs_per_block": "regsPerBlock",
    "smem_per_sm_bytes": "sharedMemPerMultiprocessor",
    "smem_per_block_optin_bytes": "sharedMemPerBlockOptin",
    "max_threads_per_sm": "maxThreadsPerMultiprocessor",
    "max_threads_per_block": "maxThreadsPerBlock",
    "warp_size": "warpSize",
    "total_mem_bytes": "totalGlobalMem",
}
# devices columns that may be 0 (every other property is a count or size: 0 or less is read as unknown; a
# negative value of these too).
NON_POSITIVE_OK = frozenset({"compute_minor"})
# Header keys that name the profiler's version, most specific first: (key, label in traces.tool_version).
TOOL_VERSION_KEYS = (("cupti_version", "cupti"), ("cuda_runtime_version", "cuda runtime"))


def _keep_launches_of_gpu_work(t: Tables) -> None:
    """Keep only the host API calls whose correlation id matches a kernel or memory operation."""
    gpu = set(t.kernels["correlation_id"])
    gpu.update(t.memops["correlation_id"])
    la = t.launches
    keep = [i for i, c in enumerate(la["correlation_id"]) if c in gpu]
    if len(keep) != len(la["correlation_id"]):
        t.launches = {c: [col[i] for i in keep] for c, col in la.items()}


def _graph_replays(t: Tables) -> Columns | None:
    """The graph_replays rows: one per graph-launching host call (cudaGraphLaunch, hipGraphLaunch, ...) that
    launched GPU work; the kernels (and memory operations) it replayed carry its correlation id. Nothing to do,
    and no pass over the kernels, in a trace without graph launches."""
    la = t.launches
    names = graph_launch_names(la["name"])
    if not names:
        return None
    calls: dict[int, HostCall] = {}
    for corr, name, start, end, pid, tid in zip(*(la[c] for c in LAUNCH_COLUMNS), strict=True):
        if name in names and corr not in calls:
            calls[corr] = HostCall(name, start, end, pid, tid)
    work = {corr: Work() for corr in calls}
    for table, kernel in ((t.kernels, True), (t.memops, False)):
        for corr, start, end, dev, stream in zip(table["correlation_id"], table["start_ns"], table["end_ns"],
                                                 table["device_id"], table["stream_id"], strict=True):
            w = work.get(corr)
            if w is not None:
                w.add(start, end, dev, stream, kernel)
    # Kernel rows do not name their process: replays are keyed by correlation id alone.
    return replay_columns({(None, c): v for c, v in calls.items()}, {(None, c): v for c, v in work.items()})


def _run_context(info: Any, ingest: Ingest) -> None:
    """rank, world_size, backend and process groups from the header's distributedInfo (torch.distributed's view
    of the run: {"backend": "nccl", "rank": 0, "world_size": 4, "pg_config": [...], ...}); absent keys stay None."""
    if type(info) is not dict:
        return
    ingest.rank = i32(info.get("rank"))
    ingest.world_size = i32(info.get("world_size"))
    backend = info.get("backend")
    ingest.dist_backend = backend if type(backend) is str and backend else None
    groups = info.get("pg_config")
    if type(groups) is list:
        ingest.process_groups = orjson.dumps(groups).decode()


def _devices(props: Any, warnings: list[str]) -> Columns | None:
    """The devices table from the header's deviceProperties (a list of objects with an integer `id`)."""
    if props is None:
        return None
    if type(props) is not list:
        warnings.append("deviceProperties is not a list; no device properties read")
        return None
    cols: Columns = {"device_id": [], **{c: [] for c in DEVICE_PROPERTIES}}
    seen: set[int] = set()
    bad = 0
    non_positive = 0
    for p in props:
        dev = i32(p.get("id")) if type(p) is dict else None
        if dev is None or dev in seen:
            bad += 1
            continue
        seen.add(dev)
        cols["device_id"].append(dev)
        for col, key in DEVICE_PROPERTIES.items():
            v = p.get(key)
            if col == "name":
                cols[col].append(v if type(v) is str else None)
            else:
                n = i64(v) if col.endswith("_bytes") else i32(v)
                if n is not None and n < (0 if col in NON_POSITIVE_OK else 1):
                    non_positive += 1
                    n = None
                cols[col].append(n)
    if bad:
        warnings.append(f"{bad} deviceProperties entries skipped: not an object with a new integer id")
    if non_positive:
        warnings.append(f"{non_positive} deviceProperties values not positive (numSms, warpSize, ...) read as unknown")
    return cols


def _tool_version(doc: dict[str, Any]) -> str | None:
    for key, label in TOOL_VERSION_KEYS:
        v = doc.get(key)
        if type(v) in (int, str):
            return f"{label} {v}"
    return None


def to_ingest(doc: dict[str, Any], t: Tables, path: Path, repairs: list[str]) -> Ingest:
    """The Ingest of a trace whose events were read into `t`; `doc` gives the header keys."""
    version = doc.get("schemaVersion")
    ingest = Ingest(
        format="kineto",
        format_version=str(version) if type(version) in (int, str) else None,
        tool_version=_tool_version(doc),
    )
    warnings = ingest.warnings
    warnings.extend(f"repaired JSON: {r}" for r in repairs)
    devices = _devices(doc.get("deviceProperties"), warnings)
    _keep_launches_of_gpu_work(t)
    _run_context(doc.get("distributedInfo"), ingest)
    for (cat, reason), n in sorted(t.skipped.items()):
        what = "traceEvents entries" if cat == "traceEvents" else f"'{cat}' events"
        warnings.append(f"{n} {what} skipped: {reason}")
    if not t.kernels["name"] and not t.memops["name"]:
        warnings.append("no GPU kernels or memory operations in the trace (profiled without ProfilerActivity.CUDA?)")
    tables = {"devices": devices, "kernels": t.kernels, "memops": t.memops, "launches": t.launches,
              "graph_replays": _graph_replays(t), "ranges": t.ranges, "collectives": t.collectives,
              "host_ops": t.host_ops.columns()}
    ingest.tables = {name: cols for name, cols in tables.items() if cols and next(iter(cols.values()))}
    return ingest
