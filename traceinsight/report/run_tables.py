"""The multi-rank runs as tables (`traceinsight sql rank0 rank1 "select … from rank_collectives"`), written into
the analysis's database when a query names one of them. Times in ns, on the run's reference rank's clock (its
lowest rank); `run` numbers the runs among the inputs (0..).

run_ranks        one row per rank of a run: run; rank; trace_id; path; world_size; clock_offset_ns (subtract from
                 the rank's own times to get the reference's); collectives (its communication kernels);
                 unmatched (those matched on no other rank).
rank_collectives one row per collective and rank: run; collective (0.. in the reference's start order); group_name
                 (process group as recorded, else 'stream#N'); kind ('allreduce', 'sendrecv', ...); seq (n-th of its
                 group and kind); nelems (input elements, when recorded); dtype; step; rank; trace_id; start_ns;
                 dur_ns; wait_ns (waiting for the last rank, ≤ dur_ns); transfer_ns (dur_ns - wait_ns); last_rank
                 (the rank that arrived last); spread_ns (last arrival - first arrival).
rank_steps       one row per step and rank: run; step; rank; trace_id; span_ns (the step's host range);
                 collective_ns (time in its matched collectives); wait_ns (of it, waiting).
rank_step_busy   one row per step, rank and kernel family: run; step; rank; family; busy_ns (kernel time of the
                 kernels launched in the step).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from traceinsight.ingest.store import TraceDB
from traceinsight.model.ranks import RunAlignment

RUN_TABLES = ("run_ranks", "rank_collectives", "rank_steps", "rank_step_busy")


def mentions_run_tables(query: str) -> bool:
    """Whether a user's SQL names one of the run tables."""
    return re.search(r"\b(" + "|".join(RUN_TABLES) + r")\b", query, re.IGNORECASE) is not None


def run_rows(runs: Sequence[RunAlignment]) -> dict[str, list[dict[str, Any]]]:
    """The rows of each run table."""
    out: dict[str, list[dict[str, Any]]] = {t: [] for t in RUN_TABLES}
    for n, run in enumerate(runs):
        tid = {r.rank: r.trace_id for r in run.ranks}
        for r in run.ranks:
            out["run_ranks"].append({"run": n, "rank": r.rank, "trace_id": r.trace_id, "path": r.path,
                                     "world_size": run.world_size, "clock_offset_ns": run.offsets_ns[r.rank],
                                     "collectives": run.counts[r.rank], "unmatched": run.unmatched[r.rank]})
        for c in run.collectives:
            for rank, s, e, w in zip(run.rank_ids, c.starts_ns, c.ends_ns, c.waits_ns, strict=True):
                out["rank_collectives"].append({
                    "run": n, "collective": c.index, "group_name": c.group, "kind": c.kind, "seq": c.seq,
                    "nelems": c.nelems, "dtype": c.dtype, "step": c.step, "rank": rank, "trace_id": tid[rank],
                    "start_ns": s, "dur_ns": e - s, "wait_ns": w, "transfer_ns": e - s - w,
                    "last_rank": c.last_rank, "spread_ns": c.spread_ns})
        for st in run.rank_steps:
            out["rank_steps"].append({"run": n, "step": st.step, "rank": st.rank, "trace_id": tid[st.rank],
                                      "span_ns": st.span_ns, "collective_ns": st.collective_ns,
                                      "wait_ns": st.wait_ns})
            for fam, ns in st.busy_ns.items():
                out["rank_step_busy"].append({"run": n, "step": st.step, "rank": st.rank, "family": fam,
                                              "busy_ns": ns})
    return out


_TYPES = {"run": pa.int32(), "rank": pa.int32(), "trace_id": pa.int32(), "world_size": pa.int32(),
          "collective": pa.int32(), "last_rank": pa.int32(), "seq": pa.int64(), "nelems": pa.int64(),
          "collectives": pa.int64(), "unmatched": pa.int64()}
_COLUMNS = {
    "run_ranks": ("run", "rank", "trace_id", "path", "world_size", "clock_offset_ns", "collectives", "unmatched"),
    "rank_collectives": ("run", "collective", "group_name", "kind", "seq", "nelems", "dtype", "step", "rank",
                         "trace_id", "start_ns", "dur_ns", "wait_ns", "transfer_ns", "last_rank", "spread_ns"),
    "rank_steps": ("run", "step", "rank", "trace_id", "span_ns", "collective_ns", "wait_ns"),
    "rank_step_busy": ("run", "step", "rank", "family", "busy_ns"),
}


def _type(col: str) -> pa.DataType:
    if col in _TYPES:
        return _TYPES[col]
    return pa.int64() if col.endswith("_ns") else pa.string()


def write_run_tables(db: TraceDB, runs: Sequence[RunAlignment]) -> None:
    """(Re)create the run tables in `db` with the rows of `runs` (empty tables when there is none)."""
    rows = run_rows(runs)
    for name in RUN_TABLES:
        cols = _COLUMNS[name]
        rel = pa.table({c: pa.array([r[c] for r in rows[name]], type=_type(c)) for c in cols})  # noqa: F841
        db.con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM rel")
