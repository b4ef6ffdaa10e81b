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
from traceinsight.model.phases import PREFILL_PHASES
from traceinsight.model.steps import ATTENTION, MERGE, PREPARE, Step
from traceinsight.queries import sql

# Families whose kernels count as attention time (the kernels that belong to an attention launch).
ATTENTION_FAMILIES = (ATTENTION, MERGE, PREPARE)
# Rows of step_gpu_work.sql read at a time (as Arrow record batches).
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


def gpu_work(db: TraceDB, trace_id: int, steps: list[Step]) -> dict[Any, Work]:
    """step_gpu_work's rows as arrays per device, read in record batches of GPU_WORK_BATCH_ROWS: each interval
    costs four int64 and one int32 column (the 10M-kernel export has 26M intervals: 0.9 GB), never a Python
    object (a batch's families are numbered through its dictionary of distinct strings)."""
    special = prefill_kernels(steps)
    special_ids = np.fromiter(special, np.int64, len(special)) if special else None
    families: dict[str, int] = {}  # family -> its number, in the order the families first occur in the rows
    chunks: dict[str, list[np.ndarray]] = {c: [] for c in ("dev", "start", "end", "launch", "family")}
    result = db.con.sql(sql("step_gpu_work"), params={"trace": trace_id})
    for batch in db.stream(result, GPU_WORK_BATCH_ROWS):
        if not batch.num_rows:
            continue
        col = dict(zip(batch.schema.names, batch.columns, strict=True))
        words, index = encode(col["family"])  # family is NOT NULL (kernel_labels; 'memory')
        for j in np.sort(np.unique(index, return_index=True)[1]).tolist():
            families.setdefault(words[int(index[j])], len(families))
        number = np.array([families[w] for w in words], np.int32)[index]
        if special_ids is not None:
            number[np.isin(ints(col["kernel_id"], -1), special_ids)] = -1  # prefill work, whatever its family
        chunks["family"].append(number)
        for key, name in (("dev", "device_id"), ("start", "start_ns"), ("end", "end_ns"), ("launch", "launch_ns")):
            # A copy, not a view of the batch's buffer: a view kept the whole batch (its kernel ids and family
            # strings too: 0.5 GB at 10M kernels) alive until the columns were joined.
            chunks[key].append(np.array(ints(col[name], -1)))
    if not chunks["start"]:
        return {}
    names: list[str] = []
    code: dict[str, int] = {}

    def cid(name: str) -> int:
        if name not in code:
            code[name] = len(names)
            names.append(name)
        return code[name]

    # Component numbers: the families' in the order they first occur, then prefill.
    codes = [cid(component_of_family(f)) for f in families] + [cid(PREFILL) if special else 0]
    lookup = np.array(codes, np.int32)  # family number -1 (prefill) takes the last entry
    # One column at a time, each column's batches freed once joined: the peak is the arrays plus one column's
    # batches.
    cols: dict[str, np.ndarray] = {}
    for key in ("dev", "start", "end", "launch", "family"):
        joined = np.concatenate(chunks.pop(key))
        cols[key] = lookup[joined] if key == "family" else joined.astype(np.int64, copy=False)
        del joined
    dev = cols.pop("dev")
    devices = sorted_distinct(dev).tolist()
    out: dict[Any, Work] = {}
    for d in devices:
        if len(devices) == 1:
            s_, e_, la, co = cols["start"], cols["end"], cols["launch"], cols["family"]
        else:
            m = dev == d
            s_, e_, la, co = cols["start"][m], cols["end"][m], cols["launch"][m], cols["family"][m]
        out[d if d >= 0 else None] = Work(s_, e_, la, co, np.maximum.accumulate(e_), names)
    return out

