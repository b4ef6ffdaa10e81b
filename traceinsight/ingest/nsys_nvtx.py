"""NVTX of an Nsight Systems export: push/pop and start/end ranges with their domains, and the MPI rank that
nsys's MPI trace names a thread after."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from traceinsight.ingest import sqlite_arrow
from traceinsight.ingest.arrow_numpy import int64_array
from traceinsight.ingest.base import Columns
from traceinsight.ingest.nsys_export import (
    MPI_RANK,
    NVTX_DOMAIN_CREATE_TYPES,
    NVTX_MARK_TYPES,
    NVTX_RANGE_TYPES,
    NVTX_TABLE,
    NVTX_THREAD_TYPES,
)
from traceinsight.ingest.nsys_query import ExportReader
from traceinsight.ingest.nsys_sql import PID_SQL, global_ids, id_list, text_sql, valid_span


def ranges(reader: ExportReader) -> None:
    """NVTX push/pop and start/end ranges, on the CPU thread that opened them."""
    t = NVTX_TABLE
    if t not in reader.tables:
        return
    if not reader.has_span(t) or "eventType" not in reader.columns(t):
        reader.ingest.warnings.append(f"{t} has no start, end or eventType column: NVTX ranges not read")
        return
    c = reader.col
    range_types = id_list(reader.enum_ids("ENUM_NSYS_EVENT_TYPE", NVTX_RANGE_TYPES))
    mark_types = id_list(reader.enum_ids("ENUM_NSYS_EVENT_TYPE", NVTX_MARK_TYPES))
    domain_types = id_list(reader.enum_ids("ENUM_NSYS_EVENT_TYPE", NVTX_DOMAIN_CREATE_TYPES))
    text, text_id = text_sql(c(t, "text")), reader.int_col(t, "textId")
    domain_id, tid = reader.int_col(t, "domainId"), reader.int_col(t, "globalTid")
    pid_sql = PID_SQL.format(col=tid)
    # One scan counts the marks, the ranges left open and the ranges with an unusable start/end.
    marks, open_ranges, skipped = reader.con.execute(
        f"SELECT coalesce(sum(eventType IN ({mark_types})), 0), "
        f'coalesce(sum(eventType IN ({range_types}) AND "end" IS NULL), 0), '
        f'coalesce(sum(eventType IN ({range_types}) AND "end" IS NOT NULL AND NOT ({valid_span()})), 0) FROM {t}'
    ).fetchone()
    if marks:
        reader.ingest.warnings.append(f"{marks} NVTX marks skipped (instants, not ranges)")
    if open_ranges:
        reader.ingest.warnings.append(f"{open_ranges} NVTX ranges without an end skipped (open at capture stop)")
    reader.warn_skipped(skipped, t, "NVTX ranges")
    # Through the Arrow driver (`int_arrays`, `texts`): `fetch`'s JSON route cost 0.5 CPU-s of the 1M-kernel
    # export's 229K ranges.
    where = f"eventType IN ({range_types}) AND {valid_span()}"
    ints = reader.int_arrays(t, ['"start"', '"end"', text_id, tid, domain_id],
                             ["start_ns", "end_ns", "_text_id", "_tid", "_domain"], where)
    texts = reader.texts(t, text, where) if text != "NULL" else [None] * len(ints["start_ns"])
    ids = global_ids(ints["_tid"])
    cols: Columns = {"start_ns": ints["start_ns"], "end_ns": ints["end_ns"], "process_id": ids["process_id"],
                     "thread_id": ids["thread_id"]}
    text_ids, dids = ints["_text_id"].to_pylist(), ints["_domain"].to_pylist()
    created = reader.con.execute(
        f"SELECT {pid_sql}, {domain_id}, {text}, {text_id} FROM {t} "
        f"WHERE eventType IN ({domain_types}) AND {domain_id} IS NOT NULL"
    ).fetchall()
    strings = reader.strings([*text_ids, *(r[3] for r in created)])
    # Domain ids are handed out per process; (None, id) is the fallback when the process is unknown.
    domains: dict[tuple[int | None, int], str] = {}
    for pid, did, txt, txt_id in created:
        name = txt if txt is not None else strings.get(txt_id)
        if name is not None:
            domains[(pid, did)] = name
            domains.setdefault((None, did), name)
    cols["name"] = reader.clipped(
        [x if x is not None else strings.get(i, "") for x, i in zip(texts, text_ids, strict=True)], "NVTX range"
    )
    cols["domain"] = reader.clipped(
        [
            None if not d else domains.get((p, d)) or domains.get((None, d)) or f"domain {d}"
            for p, d in zip(ids["process_id"].to_pylist(), dids, strict=True)
        ],
        "NVTX domain",
    )
    # The constant columns as Arrow arrays: Python lists the store would have DuckDB convert row by row.
    n = len(cols["name"])
    zeros = int64_array(np.zeros(n, np.int64))
    cols["kind"] = sqlite_arrow.dictionary(zeros, ["nvtx"])
    cols["side"] = sqlite_arrow.dictionary(zeros, ["cpu"])
    cols["device_id"] = pa.nulls(n, pa.int64())
    cols["stream_id"] = pa.nulls(n, pa.int64())
    reader.ingest.tables["ranges"] = cols


def run_context(reader: ExportReader) -> None:
    """The rank of an MPI run: nsys's MPI trace names the rank's thread 'MPI Rank N' (an NvtxThread event). The
    only run context an export states; NCCL's NVTX ranges carry no rank in their text. Else all stay None."""
    t = NVTX_TABLE
    if t not in reader.tables or "eventType" not in reader.columns(t):
        return
    types = id_list(reader.enum_ids("ENUM_NSYS_EVENT_TYPE", NVTX_THREAD_TYPES))
    text, text_id = text_sql(reader.col(t, "text")), reader.int_col(t, "textId")
    rows = reader.con.execute(f"SELECT DISTINCT {text}, {text_id} FROM {t} WHERE eventType IN ({types})").fetchall()
    strings = reader.strings(r[1] for r in rows)
    names = {x if x is not None else strings.get(i) for x, i in rows}
    ranks = {int(m[1]) for n in names if n is not None and (m := MPI_RANK.match(n))}
    if len(ranks) == 1:
        reader.ingest.rank = ranks.pop()
        reader.ingest.dist_backend = "mpi"
