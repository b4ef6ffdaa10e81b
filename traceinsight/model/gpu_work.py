"""All GPU work of a trace as arrays per device, for the step breakdown: every kernel and memory operation with the
start of the host call that launched it and the component its time counts in."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from traceinsight.components import PREFILL
from traceinsight.ingest.arrow_numpy import encode, numbers
from traceinsight.ingest.store import TraceDB
from traceinsight.model.phases import PREFILL_PHASES
from traceinsight.model.steps import ATTENTION, MERGE, PREPARE, Step, labels_of
from traceinsight.queries import sql

# Families whose kernels count as attention time (the kernels that belong to an attention launch).
ATTENTION_FAMILIES = (ATTENTION, MERGE, PREPARE)
# Rows of gpu_work_ordered.sql read at a time (as Arrow record batches).
GPU_WORK_BATCH_ROWS = 1 << 20


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
    result = db.con.sql(sql("gpu_work_ordered"), params={"trace": trace_id})
    for batch in db.stream(result, GPU_WORK_BATCH_ROWS):
        if not batch.num_rows:
            continue
        col = dict(zip(batch.schema.names, batch.columns, strict=True))
        words, index = encode(col["family"])  # NOT NULL (kernel_labels; 'memory')
        comp = np.array([codes.setdefault(w, names.index(component_of_family(w))) for w in words], np.int32)[index]
        if len(special_ids):
            comp[np.isin(numbers(col["kernel_id"]), special_ids)] = prefill
        device = numbers(col["device_id"])
        start, end, launch = (np.array(numbers(col[c]), np.int64) for c in ("start_ns", "end_ns", "launch_ns"))
        cuts = [0, *(np.flatnonzero(device[1:] != device[:-1]) + 1).tolist(), len(device)]
        for a, b in itertools.pairwise(cuts):
            d = int(device[a])
            yield Piece(None if d < 0 else d, start[a:b], end[a:b], launch[a:b], comp[a:b])


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
