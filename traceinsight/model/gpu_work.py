"""All GPU work of a trace as arrays per device, for the step breakdown: every kernel and memory operation with the
start of the host call that launched it and the component its time counts in."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from traceinsight.components import PREFILL
from traceinsight.ingest.arrow_numpy import encode, ints, sorted_distinct
from traceinsight.ingest.store import TraceDB
from traceinsight.model.launch_calls import NULL_ID, launch_calls, launch_starts
from traceinsight.model.phases import PREFILL_PHASES
from traceinsight.model.steps import ATTENTION, MERGE, PREPARE, Step
from traceinsight.queries import sql

# Families whose kernels count as attention time (the kernels that belong to an attention launch).
ATTENTION_FAMILIES = (ATTENTION, MERGE, PREPARE)
# Rows of the step_gpu_* queries read at a time (as Arrow record batches).
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


def _read(db: TraceDB, query: str, trace_id: int, columns: dict[str, int],
          family: bool = False) -> tuple[dict[str, np.ndarray], list[str], np.ndarray]:
    """A named query's integer columns as int64 arrays (NULL as the value `columns` gives), read in record batches
    of GPU_WORK_BATCH_ROWS, and (`family`) its family column numbered: the distinct families in the order first
    read, and each row's number (int32). Never a Python object per row."""
    chunks: dict[str, list[np.ndarray]] = {c: [] for c in columns}
    families: dict[str, int] = {}
    numbers: list[np.ndarray] = []
    for batch in db.stream(db.con.sql(sql(query), params={"trace": trace_id}), GPU_WORK_BATCH_ROWS):
        if not batch.num_rows:
            continue
        col = dict(zip(batch.schema.names, batch.columns, strict=True))
        for name, null in columns.items():
            # A copy, not a view of the batch's buffer: a view kept the whole batch (its family strings too: 0.5 GB
            # at 10M kernels) alive until the columns were joined.
            chunks[name].append(np.array(ints(col[name], null), np.int64))
        if family:
            words, index = encode(col["family"])  # NOT NULL (kernel_labels)
            numbers.append(np.array([families.setdefault(w, len(families)) for w in words], np.int32)[index])
    out = {c: np.concatenate(v) if v else np.zeros(0, np.int64) for c, v in chunks.items()}
    return out, list(families), np.concatenate(numbers) if numbers else np.zeros(0, np.int32)


def gpu_work(db: TraceDB, trace_id: int, steps: list[Step]) -> dict[Any, Work]:
    """Every kernel (step_gpu_kernels.sql) and memory operation (step_gpu_memops.sql, family 'memory') of the trace
    with the start of its launch call (step_gpu_launches.sql, found by `launch_calls`), ordered by start and end,
    as arrays per device (None: the device is not known): each interval costs four int64 and one int32 column
    (the 10M-kernel export has 26M intervals: 0.9 GB). Components are numbered in the order their families first
    occur in that order, prefill last."""
    special = prefill_kernels(steps)
    calls = launch_calls(*_read(db, "step_gpu_launches", trace_id,
                                {"correlation_id": NULL_ID, "process_id": NULL_ID, "start_ns": 0})[0].values())
    k, families, k_family = _read(db, "step_gpu_kernels", trace_id,
                                  {"kernel_id": -1, "device_id": -1, "start_ns": 0, "end_ns": 0,
                                   "correlation_id": NULL_ID, "process_id": NULL_ID}, family=True)
    k_launch = launch_starts(calls, k.pop("correlation_id"), k.pop("process_id"))
    m = _read(db, "step_gpu_memops", trace_id, {"device_id": -1, "start_ns": 0, "end_ns": 0,
                                                "correlation_id": NULL_ID})[0]
    m_launch = launch_starts(calls, m.pop("correlation_id"))
    del calls
    if not len(k["start_ns"]) and not len(m["start_ns"]):
        return {}
    prefill = np.isin(k.pop("kernel_id"), np.fromiter(special, np.int64, len(special))) if special else None
    memory = families.index("memory") if "memory" in families else len(families)
    if memory == len(families) and len(m["start_ns"]):
        families.append("memory")
    start = np.concatenate((k["start_ns"], m["start_ns"]))
    end = np.concatenate((k["end_ns"], m["end_ns"]))
    # By start, then end: a stable sort of the starts (the kernels come in start order already, and so mostly do
    # the memory operations), all of (start, end) only where two start at once.
    order = np.argsort(start, kind="stable")
    if len(order) > 1 and bool((start[order[1:]] == start[order[:-1]]).any()):
        order = np.lexsort((end, start))
    start, end = start[order], end[order]
    launch = np.concatenate((k_launch, m_launch))[order]
    dev = np.concatenate((k["device_id"], m["device_id"]))[order]
    number = np.concatenate((k_family, np.full(len(m["start_ns"]), memory, np.int32)))
    if prefill is not None:
        special_rows = np.concatenate((prefill, np.zeros(len(m["start_ns"]), bool)))[order]
    del k, m, k_launch, m_launch
    number = number[order]
    del order
    # Component numbers: the families' in the order they first occur, then prefill.
    firsts = {f: np.flatnonzero(number == i)[:1] for i, f in enumerate(families)}
    code: dict[str, int] = {}
    for f in sorted((f for f in families if len(firsts[f])), key=lambda f: int(firsts[f][0])):
        code.setdefault(component_of_family(f), len(code))
    lookup = [code.get(component_of_family(f), 0) for f in families]
    if prefill is not None:
        number[special_rows] = len(lookup)  # prefill work, whatever its family
        lookup.append(code.setdefault(PREFILL, len(code)))
        del special_rows
    names = list(code)
    comp = np.array(lookup or [0], np.int32)[number]
    del number
    devices = dev[:1].tolist() if bool((dev == dev[0]).all()) else sorted_distinct(dev).tolist()
    out: dict[Any, Work] = {}
    for d in devices:
        if len(devices) == 1:
            s_, e_, la, co = start, end, launch, comp
        else:
            at = dev == d
            s_, e_, la, co = start[at], end[at], launch[at], comp[at]
        out[d if d >= 0 else None] = Work(s_, e_, la, co, np.maximum.accumulate(e_), names)
    return out
