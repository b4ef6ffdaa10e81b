"""Kernels, memory operations and launching API calls of an Nsight Systems export: its large activity tables,
as Arrow columns (string columns dictionary-encoded, one entry per distinct name)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceinsight.ingest import sqlite_arrow
from traceinsight.ingest.arrow_numpy import int64_array, int_array, ints, valid
from traceinsight.ingest.base import Columns
from traceinsight.ingest.nsys_export import (
    API_VERSION_SUFFIX,
    BACKTRACE_CLASSES,
    GRAPH_TRACE_TABLE,
    KERNEL_TABLE,
    MEMCPY_KINDS,
    MEMCPY_TABLE,
    MEMSET_TABLE,
    RUNTIME_TABLE,
)
from traceinsight.ingest.nsys_query import ExportReader, clip_codes
from traceinsight.ingest.nsys_sql import I32, I64, global_ids, id_list, int_sql, quote, text_sql, valid_span

# The kernel table's columns: normalized name -> (export column, bounds).
KERNEL_SPEC: dict[str, tuple[str, tuple[int, int] | None]] = {
    "device_id": ("deviceId", I32),
    "stream_id": ("streamId", I64),
    "grid_x": ("gridX", I32),
    "grid_y": ("gridY", I32),
    "grid_z": ("gridZ", I32),
    "block_x": ("blockX", I32),
    "block_y": ("blockY", I32),
    "block_z": ("blockZ", I32),
    "registers_per_thread": ("registersPerThread", I32),
    "static_smem_bytes": ("staticSharedMemory", I32),
    "dynamic_smem_bytes": ("dynamicSharedMemory", I32),
    "correlation_id": ("correlationId", I64),
    "graph_node_id": ("graphNodeId", I64),
    "graph_id": ("graphId", I64),  # in exports that have it (2025.3's lacks it)
    "_pid": ("globalPid", I64),
    "_demangled": ("demangledName", I64),
    "_short": ("shortName", I64),
    "_mangled": ("mangledName", I64),
}


class _Strings:
    """StringIds values looked up once each across the slices of a table."""

    def __init__(self, reader: ExportReader) -> None:
        self.reader = reader
        self.known: dict[int, str] = {}
        self.asked: set[int] = set()

    def of(self, ids: list[Any]) -> dict[int, str]:
        """The values of `ids` that StringIds holds (as `ExportReader.strings`)."""
        new = [i for i in ids if isinstance(i, int) and i not in self.asked]
        if new:
            self.known.update(self.reader.strings(new))
            self.asked.update(new)
        return {i: self.known[i] for i in ids if i in self.known}


def kernels(reader: ExportReader) -> None:
    """The `kernels` table: every CUDA kernel with its launch dimensions, resources, graph ids and name."""
    reader.ingest.tables["kernels"] = next(iter(list(kernel_slices(reader, None))))


def kernel_slices(reader: ExportReader, rows: int | None) -> Iterator[Columns]:
    """The `kernels` table a slice of at most `rows` rows at a time (None: one slice); its warnings once the last
    is read."""
    t = KERNEL_TABLE
    spec = KERNEL_SPEC
    strings = _Strings(reader)
    clipped = {"kernel": 0, "mangled kernel": 0}
    unnamed = 0
    smem_known = {"staticSharedMemory", "dynamicSharedMemory"} <= reader.columns(t)
    for got in reader.checked_slices(t, spec, "kernels", "", rows):
        static, dynamic = got["static_smem_bytes"], got["dynamic_smem_bytes"]
        if smem_known:
            smem = sqlite_arrow.within(pc.add(static, dynamic), I32)  # null where either is
        else:
            smem = pa.nulls(len(static), pa.int64())
        cols: Columns = {n: got[n] for n in ["start_ns", "end_ns", *list(spec)[:11]]}
        cols["smem_bytes"] = smem
        cols["correlation_id"] = got["correlation_id"]
        cols["graph_node_id"] = got["graph_node_id"]
        graph = got["graph_id"]  # CUPTI writes 0 for a kernel not launched from a graph
        if graph.null_count < len(graph):
            ids = ints(graph, 0)
            graph = int64_array(ids, valid(graph) & (ids != 0))
        cols["graph_id"] = graph
        cols["process_id"] = global_ids(got["_pid"])["process_id"]
        demangled, short, mangled = got["_demangled"], got["_short"], got["_mangled"]
        names = strings.of(pc.unique(pa.concat_arrays([demangled, short, mangled])).to_pylist())
        # The demangled name, else the short one, else the mangled one, else "": codes into one label list,
        # computed once per distinct id.
        labels = ["", *sorted({v for v in names.values() if v})]
        index = {v: i for i, v in enumerate(labels)}

        def codes(ids: pa.Array, names: dict[int, str] = names, index: dict[str, int] = index) -> pa.Array:
            distinct = pc.unique(ids)
            per = [index.get(names.get(i, "")) if i is not None else None for i in distinct.to_pylist()]
            return pc.take(int_array(per, len(per)), pc.index_in(ids, value_set=distinct))

        chosen = pc.coalesce(codes(demangled), codes(short), codes(mangled), int64_array(np.zeros(len(demangled))))
        cols["name"], n = clip_codes(sqlite_arrow.dictionary(chosen, labels))
        clipped["kernel"] += n
        cols["mangled_name"], n = clip_codes(sqlite_arrow.lookup(mangled, names))
        clipped["mangled kernel"] += n
        unnamed += sqlite_arrow.count_codes(chosen, [0])
        yield cols
    for what, n in clipped.items():
        reader.warn_clipped(n, what)
    if unnamed:
        reader.ingest.warnings.append(f"{unnamed} kernels without a name in StringIds")


# memops' two kinds, in the order of the `kind` column's dictionary.
MEMOP_KINDS = ["memcpy", "memset"]


def memops(reader: ExportReader) -> None:
    """The `memops` table: memory copies (named by their kind) and memsets."""
    texts: dict[str, int] = {}  # operation name -> code of the name column
    parts = list(memop_slices(reader, None, texts))
    if sum(len(p["kind"]) for p in parts):
        out: Columns = {n: pa.concat_arrays([p[n] for p in parts]) for n in parts[0]}
        out["kind"] = sqlite_arrow.dictionary(out["kind"], MEMOP_KINDS)
        out["name"] = sqlite_arrow.dictionary(out["name"], list(texts))
        reader.ingest.tables["memops"] = out


def memop_dictionaries(part: dict[str, pa.Array], texts: dict[str, int]) -> Columns:
    """A slice of `memop_slices` with its kind and name codes as dictionary columns."""
    out: Columns = dict(part)
    out["kind"] = sqlite_arrow.dictionary(part["kind"], MEMOP_KINDS)
    out["name"] = sqlite_arrow.dictionary(part["name"], list(texts))
    return out


def memop_slices(reader: ExportReader, rows: int | None, texts: dict[str, int]) -> Iterator[dict[str, pa.Array]]:
    """Memory copies, then memsets, a slice of at most `rows` rows at a time (None: one slice per table): int64
    columns, and int32 codes for `kind` (MEMOP_KINDS) and `name` (into `texts`, filled as names are met)."""
    names = ["device_id", "stream_id", "start_ns", "end_ns", "bytes", "correlation_id"]
    labels = dict(MEMCPY_KINDS)
    enum = "ENUM_CUDA_MEMCPY_OPER"
    if enum in reader.tables and {"id", "label"} <= reader.columns(enum):
        found = reader.con.execute(f"SELECT {int_sql(quote('id'))}, {text_sql(quote('label'))} FROM {enum}")
        labels.update((i, lab) for i, lab in found if i is not None and lab is not None)
    for table, kind in ((MEMCPY_TABLE, "memcpy"), (MEMSET_TABLE, "memset")):
        if table not in reader.tables:
            continue
        if not reader.has_span(table):
            reader.ingest.warnings.append(f"{table} has no start/end columns: {kind} operations not read")
            continue
        spec: dict[str, tuple[str, tuple[int, int] | None]] = {
            "device_id": ("deviceId", I32),
            "stream_id": ("streamId", I64),
            "bytes": ("bytes", I64),
            "correlation_id": ("correlationId", I64),
            "_copy": ("copyKind" if kind == "memcpy" else "", I64),  # "": no such column, all None
        }
        for cols in reader.checked_slices(table, spec, f"{kind} operations", "", rows):
            copy = cols["_copy"]
            part = {"kind": _int32s(np.full(len(copy), MEMOP_KINDS.index(kind)))}
            if kind == "memset":
                code = texts.setdefault("[CUDA memset]", len(texts))
                part["name"] = _int32s(np.full(len(copy), code))
            else:
                distinct = pc.unique(copy)
                per = [
                    texts.setdefault(f"[CUDA memcpy {labels.get(k, f'kind {k}')}]", len(texts))
                    for k in distinct.to_pylist()
                ]
                part["name"] = pc.take(_int32s(np.array(per)), pc.index_in(copy, value_set=distinct))
            yield {**part, **{n: cols[n] for n in names}}


def _int32s(values: np.ndarray) -> pa.Array:
    """Integers as an int32 Arrow array, from their buffer (`pa.array` and `pa.scalar` import pandas)."""
    return pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(values.astype(np.int32))])


def launches(reader: ExportReader) -> None:
    """Runtime/driver API calls whose correlation id launched a kernel, memcpy or memset."""
    parts = list(launch_slices(reader, None))
    if parts:
        reader.ingest.tables["launches"] = parts[0]


def launch_slices(reader: ExportReader, rows: int | None) -> Iterator[Columns]:
    """`launches` a slice of at most `rows` rows at a time (None: one slice); its warnings once the last is read."""
    t = RUNTIME_TABLE
    if t not in reader.tables or "correlationId" not in reader.columns(t):
        reader.ingest.warnings.append(f"no {t} table: kernels cannot be traced to the calls that launched them")
        return
    if not reader.has_span(t):
        reader.ingest.warnings.append(f"{t} has no start/end columns: launches not read")
        return
    gpu_work = [
        x
        for x in (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE, GRAPH_TRACE_TABLE)
        if x in reader.tables and "correlationId" in reader.columns(x)
    ]
    if not gpu_work:
        return
    launched = " UNION ALL ".join(
        f"SELECT correlationId FROM {x} WHERE typeof(correlationId) = 'integer'" for x in gpu_work
    )
    spec: dict[str, tuple[str, tuple[int, int] | None]] = {
        "correlation_id": ("correlationId", None),  # an integer: the query keeps no other
        "_name": ("nameId", I64),
        "_tid": ("globalTid", I64),
    }
    # SQLite builds the set of launched ids once per statement (an ephemeral index), then probes it per row:
    # cheaper than fetching every runtime row and filtering them here (measured: 2.3 s against 2.9 s on the
    # 1M-kernel benchmark export, 6.9M runtime rows of which 2.6M launch GPU work). Read a slice at a time, it
    # is still one statement (the driver's record batches are read as they come).
    where = f"typeof(correlationId) = 'integer' AND correlationId IN ({launched})"
    if "eventClass" in reader.columns(t):
        # Backtrace rows are left out, but those with unusable start/end still come back, to be counted in
        # the skipped-rows warning (checked_slices drops every such row).
        classes = id_list(reader.enum_ids("ENUM_NSYS_EVENT_CLASS", BACKTRACE_CLASSES))
        where += f" AND (eventClass NOT IN ({classes}) OR NOT ({valid_span()}))"
    strings = _Strings(reader)
    clipped = 0
    for got in reader.checked_slices(t, spec, "launch calls", where, rows):
        cols: Columns = {
            "correlation_id": got["correlation_id"],
            "start_ns": got["start_ns"],
            "end_ns": got["end_ns"],
            **global_ids(got["_tid"]),
        }
        name_ids = got["_name"]
        distinct = pc.unique(name_ids).to_pylist()
        names = {i: API_VERSION_SUFFIX.sub("", s) for i, s in strings.of(distinct).items()}
        cols["name"], n = clip_codes(sqlite_arrow.lookup(name_ids, names, missing=""))
        clipped += n
        yield cols
    reader.warn_clipped(clipped, "API call")
