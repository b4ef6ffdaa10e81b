"""All GPU work of a trace as arrays per device, for the step breakdown: every kernel and memory operation with the
start of the host call that launched it and the component its time counts in."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

from traceinsight.components import PREFILL
from traceinsight.ingest.arrow_numpy import encode, ints, numbers, sorted_distinct
from traceinsight.ingest.store import TraceDB
from traceinsight.model.launch_calls import NULL_ID, launch_calls, launch_starts
from traceinsight.model.phases import PREFILL_PHASES
from traceinsight.model.steps import ATTENTION, MERGE, PREPARE, Step, labels_of
from traceinsight.queries import sql

# Families whose kernels count as attention time (the kernels that belong to an attention launch).
ATTENTION_FAMILIES = (ATTENTION, MERGE, PREPARE)
# Rows of gpu_work_ordered.sql read at a time (as Arrow record batches).
GPU_WORK_BATCH_ROWS = 1 << 20
# A gap between two correlation ids of a batch's work past which their launch calls are read as two ranges.
CALL_RANGE_GAP = 1 << 16


def component_of_family(family: str | None) -> str:
    """The component a kernel of this family counts in when it belongs to no attention launch."""
    if family is None:
        return "other"
    return ATTENTION if family in ATTENTION_FAMILIES else family


@dataclass
class Work:
    """All GPU work of one device, sorted by start, with each interval's component code (int64 arrays)."""

    start: np.ndarray
    end: np.ndarray
    launch: np.ndarray  # -1: unknown
    comp: np.ndarray  # index into names
    reach: np.ndarray  # running maximum of end
    names: list[str]


def prefill_kernels(steps: Iterable[Step]) -> set[int]:
    """Kernel ids that are prefill work whatever their family: the attention, merge and prepare kernels of
    attention launches that ran prefill (or prefill mixed with decode rows)."""
    return {k.kernel_id for s in steps for x in s.launches if x.phase in PREFILL_PHASES
            for k in (x.attention, *x.merges, *x.prepares)}


@dataclass
class Piece:
    """A run of one device's GPU work in the order it is split in (queries/gpu_work_ordered.sql): at most a record
    batch of it, int64 arrays (`comp`: int32, index into the names `work_names` gives)."""

    device: Any  # None: not known
    start: np.ndarray
    end: np.ndarray
    launch: np.ndarray
    comp: np.ndarray


def work_names(db: TraceDB) -> list[str]:
    """Every component GPU work of the database can count in, fixed before any is read (a stream's later rows must
    not renumber them): each kernel label's family's (`component_of_family`), memory, then prefill. The numbers
    only name the components: a breakdown orders them by where they first ran in its window."""
    families = sorted({fields[2] for fields in labels_of(db).values()})
    return list(dict.fromkeys([*map(component_of_family, families), "memory", PREFILL]))


def work_devices(db: TraceDB, trace_id: int) -> list[Any]:
    """The devices the trace's GPU work ran on, in the order `work_pieces` gives them (None: not known)."""
    return [None if d < 0 else d for (d,) in db.sql(sql("gpu_work_devices"), {"trace": trace_id}).fetchall()]


def work_pieces(db: TraceDB, trace_id: int, steps: list[Step], names: list[str]) -> Iterator[Piece]:
    """Every kernel and memory operation of the trace with the start of its launch call and its component (prefill
    for the kernels of attention launches that ran prefill, `prefill_kernels`), device by device, each device's by
    start then end (queries/gpu_work_ordered.sql): DuckDB joins and sorts under its limit, spilling what does not
    fit, and the caller holds GPU_WORK_BATCH_ROWS rows at a time. Copies, not views of a batch's buffers: a view
    kept the whole batch (its family strings too) alive."""
    special = prefill_kernels(steps)
    special_ids = np.sort(np.fromiter(special, np.int64, len(special)))
    prefill = names.index(PREFILL)
    codes: dict[str, int] = {}
    # The calls are read while the work's result is open: on a cursor of their own, in the connection's database.
    catalog = db.con.execute("SELECT current_database()").fetchall()[0][0]
    calls_cursor = db.con.cursor()
    calls_cursor.execute(f'USE "{catalog}"')
    result = db.con.sql(sql("gpu_work_ordered"), params={"trace": trace_id})
    try:
        for batch in db.stream(result, GPU_WORK_BATCH_ROWS):
            if not batch.num_rows:
                continue
            col = dict(zip(batch.schema.names, batch.columns, strict=True))
            words, index = encode(col["family"])  # NOT NULL (kernel_labels; 'memory')
            comp = np.array([codes.setdefault(w, names.index(component_of_family(w))) for w in words],
                            np.int32)[index]
            kernel_id = numbers(col["kernel_id"])
            if len(special_ids):
                comp[np.isin(kernel_id, special_ids)] = prefill
            device = numbers(col["device_id"])
            start, end = (np.array(numbers(col[c]), np.int64) for c in ("start_ns", "end_ns"))
            launch = _launch_starts(calls_cursor, trace_id, ints(col["correlation_id"], NULL_ID),
                                    ints(col["process_id"], NULL_ID), kernel_id >= 0)
            del batch, col
            cuts = [0, *(np.flatnonzero(device[1:] != device[:-1]) + 1).tolist(), len(device)]
            for a, b in itertools.pairwise(cuts):
                d = int(device[a])
                yield Piece(None if d < 0 else d, start[a:b], end[a:b], launch[a:b], comp[a:b])
    finally:
        calls_cursor.close()


def _launch_starts(cursor: duckdb.DuckDBPyConnection, trace_id: int, corr: np.ndarray, pid: np.ndarray,
                   kernel: np.ndarray) -> np.ndarray:
    """Each row's launch start (`launch_calls.launch_starts`: a kernel's by its process, a memory operation's
    whatever the process), among the calls of the rows' correlation ids only: read (gpu_work_calls.sql) a range of
    ids at a time, the ranges cut where the rows' distinct ids leave a gap of more than CALL_RANGE_GAP (a batch of
    work in time order holds ids launched close together, and a few stragglers)."""
    ids = sorted_distinct(corr[corr != NULL_ID])
    parts: dict[str, list[np.ndarray]] = {"correlation_id": [], "process_id": [], "start_ns": []}
    if len(ids):
        cut = np.flatnonzero(np.diff(ids) > CALL_RANGE_GAP)
        for lo, hi in zip(ids[np.concatenate(([0], cut + 1))].tolist(), ids[np.append(cut, len(ids) - 1)].tolist(),
                          strict=True):
            rows = cursor.sql(sql("gpu_work_calls"), params={"trace": trace_id, "lo": lo, "hi": hi}).to_arrow_table()
            for c, got in parts.items():
                got.append(np.array(ints(rows.column(c).combine_chunks(), NULL_ID), np.int64))
    calls = launch_calls(*(np.concatenate(v) if v else np.zeros(0, np.int64) for v in parts.values()))
    out = np.empty(len(corr), np.int64)
    out[kernel] = launch_starts(calls, corr[kernel], pid[kernel])
    out[~kernel] = launch_starts(calls, corr[~kernel])
    return out


def gpu_work(db: TraceDB, trace_id: int, steps: list[Step]) -> dict[Any, Work]:
    """`work_pieces` joined into whole arrays per device (a long trace's 26M intervals at 10M kernels: 0.9 GB;
    the step breakdown holds only the part its windows still need, model/work_buffer.py)."""
    names = work_names(db)
    parts: dict[Any, list[Piece]] = {}
    for piece in work_pieces(db, trace_id, steps, names):
        parts.setdefault(piece.device, []).append(piece)
    out: dict[Any, Work] = {}
    for d, ps in parts.items():
        start, end, launch, comp = (np.concatenate([getattr(p, c) for p in ps])
                                    for c in ("start", "end", "launch", "comp"))
        out[d] = Work(start, end, launch, comp, np.maximum.accumulate(end), names)
    return out
