"""Group a trace's kernels into decode steps and decide, per attention launch, whether split-KV was on.

A step is, in order of preference:
1. an annotation / NVTX / profiler-step range that enclosed the attention launches (CPU ranges match the
   launching call on the same thread; Kineto's GPU-side annotations match the kernel's own time). Each
   attention kernel takes the *outermost* such range, ignoring wrappers that hold more than half of all
   attention launches of the trace (a whole-run range is not a step), unless `step_pattern` picks ranges
   by name;
2. when no attention launch of the trace has a range around it, one attention launch together with its
   merge/combine (and prepare) kernels. When ranges do define steps, attention launches outside all of them
   (warm-ups, planning runs) are not steps: `group_steps` returns them apart as unassigned launches.

Split-KV of a launch comes from the trace alone: backends that split through a separate merge/combine kernel
are "on" exactly when such a kernel follows the launch on the same stream within the step; backends that never
split are "off"; others are unknown (None).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from traceinsight import labels
from traceinsight.ingest.store import TraceDB
from traceinsight.model.kernel_table import ensure_labels
from traceinsight.queries import sql

ATTENTION = "attention"
MERGE = "merge"
PREPARE = "prepare"

# How each backend shows split-KV in a trace: 'merge' = a separate merge/combine kernel follows a split launch;
# 'never' = the backend does not split along KV. Backends not listed: unknown.
SPLIT_SIGNAL: dict[str, str] = {
    "flashinfer-cuda-core": "merge",
    "flashinfer-fa2": "merge",
    "flashinfer-sm90": "never",
    "fa3": "merge",
    "fa2": "merge",
    "pytorch-flash": "merge",
}

# Requests one CTA of FA3's prepare_varlen_num_blocks kernel handles (its grid is ceil(B / this)); with more than
# one CTA no request is split (flash_prepare_scheduler.cu, PREPARE_VARLEN_MAX_BATCHES_1CTA).
FA3_CAP_PER_PREPARE_CTA = 992

# A range holding more than this share of all attention launches is a wrapper, not a step.
WRAPPER_SHARE = 0.5


@dataclass(slots=True)
class Kernel:
    """One kernel execution with its label (times in ns)."""

    kernel_id: int
    name: str
    kernel: str
    family: str
    backend: str | None
    phase: str
    phase_evidence: str
    params: dict[str, Any]
    stream_id: int | None
    device_id: int | None
    start_ns: int
    end_ns: int
    dur_ns: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers_per_thread: int | None
    smem_bytes: int | None


@dataclass
class Launch:
    """An attention kernel launch and the merge/prepare kernels that belong to it."""

    attention: Kernel
    merges: list[Kernel] = field(default_factory=list)
    prepares: list[Kernel] = field(default_factory=list)
    phase: str = "unknown"
    phase_evidence: str = ""
    split_kv: bool | None = None
    split_evidence: str = ""
    tiles: dict[str, Any] | None = None  # query-tile padding of a tensor-core launch (model.phases.tile_padding)

    @property
    def dur_ns(self) -> int:
        """Attention kernel time plus its merge and prepare kernels (ns)."""
        return self.attention.dur_ns + sum(k.dur_ns for k in self.merges) + sum(k.dur_ns for k in self.prepares)


@dataclass
class Step:
    index: int
    name: str
    source: str  # 'range:<kind>' or 'launch'
    range_id: int | None
    start_ns: int  # first GPU kernel of the step
    end_ns: int  # last GPU kernel end of the step
    kernels: list[Kernel]
    launches: list[Launch]
    range_start_ns: int | None = None  # the step's range (CPU: on the launching thread; GPU: on the device)
    range_end_ns: int | None = None
    range_side: str | None = None  # 'cpu' | 'gpu' | None (a step of one launch, no range)
    breakdown: Any = None  # traceinsight.model.breakdown.StepBreakdown, set by the pipeline

    @property
    def dur_ns(self) -> int:
        """GPU span of the step's own kernels: first kernel start to last kernel end (ns)."""
        return self.end_ns - self.start_ns

    @property
    def wall_ns(self) -> int:
        """What the step took as the engine waits for it (ns): its breakdown's window (the step's range on the
        host through the end of its GPU work, see `traceinsight.model.breakdown`), else its GPU span."""
        return self.breakdown.wall_ns if self.breakdown is not None else self.dur_ns

    @property
    def attention_ns(self) -> int:
        """GPU time of the step's attention launches with their merge/prepare kernels (ns)."""
        return sum(launch.dur_ns for launch in self.launches)

    @property
    def phase(self) -> str:
        """'decode' | 'prefill' | 'mixed' (prefill and decode rows in the step) | 'unknown', from its launches."""
        phases = {launch.phase for launch in self.launches}
        if not phases:
            return "unknown"
        if len(phases) == 1:
            return phases.pop()
        if "mixed" in phases or {"decode", "prefill"} <= phases:
            return "mixed"
        known = phases - {"unknown"}
        return known.pop() if len(known) == 1 else "unknown"

    @property
    def split_kv(self) -> bool | None:
        """True/False when every attention launch of the step agrees, else None (mixed or unknown)."""
        states = {launch.split_kv for launch in self.launches}
        return states.pop() if len(states) == 1 else None


def _kernels(db: TraceDB, trace_id: int) -> list[Kernel]:
    """Every kernel of the trace with its label, in start order. Fetched as Arrow columns; each text column is
    dictionary-encoded first, so a million launches of one kernel share one name string (and one parsed
    params dict) instead of holding a million copies."""
    table = db.con.sql(sql("step_kernel_rows"), params={"trace": trace_id}).to_arrow_table()
    col = {name: _pylist(table.column(name)) for name in table.column_names}
    parsed = {raw: json.loads(raw) if raw else {} for raw in set(col["params_json"])}
    grid = zip(*(_or_zero(col[f"grid_{a}"]) for a in "xyz"), strict=True)
    block = zip(*(_or_zero(col[f"block_{a}"]) for a in "xyz"), strict=True)
    head = ("kernel_id", "name", "kernel", "family", "backend", "phase")
    tail = ("stream_id", "device_id", "start_ns", "end_ns", "dur_ns")
    rows = zip(
        *(col[n] for n in head),
        col["phase_evidence"],
        col["params_json"],
        *(col[n] for n in tail),
        grid,
        block,
        col["registers_per_thread"],
        col["smem_bytes"],
        strict=True,
    )
    return [
        Kernel(kid, name, kernel, family, backend, phase, evidence or "", parsed[params_json],
               stream, device, start, end, dur, g, b, regs, smem)
        for kid, name, kernel, family, backend, phase, evidence, params_json,
        stream, device, start, end, dur, g, b, regs, smem in rows
    ]


def _pylist(column: pa.ChunkedArray) -> list[Any]:
    """A column as a list; text through its dictionary, so equal strings are one object."""
    values = column.combine_chunks()
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        encoded = values.dictionary_encode()
        words = encoded.dictionary.to_pylist()
        return [None if i is None else words[i] for i in encoded.indices.to_pylist()]
    out: list[Any] = values.to_pylist()
    return out


def _or_zero(values: list[Any]) -> list[int]:
    return [0 if v is None else v for v in values]


def _step_ranges(
    db: TraceDB, trace_id: int, n_attention: int, step_pattern: str | None
) -> tuple[dict[int, int], dict[int, dict[str, Any]]]:
    """Map attention kernel_id -> chosen range_id; and range_id -> range row."""
    rows = db.rows(sql("enclosing_ranges"), {"families": [ATTENTION]})
    if not rows:
        return {}, {}
    pattern = re.compile(step_pattern) if step_pattern else None
    per_range: dict[int, set[int]] = defaultdict(set)
    info: dict[int, dict[str, Any]] = {}
    for r in rows:
        per_range[r["range_id"]].add(r["kernel_id"])
        info[r["range_id"]] = r
    limit = max(1, int(n_attention * WRAPPER_SHARE))
    by_kernel: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        rid = r["range_id"]
        if pattern is not None:
            if not pattern.search(r["name"]):
                continue
        elif len(per_range[rid]) > limit:
            continue
        by_kernel[r["kernel_id"]].append(r)
    chosen: dict[int, int] = {}
    for kid, cands in by_kernel.items():
        # Prefer CPU ranges (they say who launched the work), then the outermost (earliest start, longest).
        cands.sort(key=lambda r: (r["side"] != "cpu", r["start_ns"], -(r["end_ns"] - r["start_ns"])))
        chosen[kid] = cands[0]["range_id"]
    return chosen, info


def _attach(members: list[Kernel]) -> list[Launch]:
    """Within one step (kernels in start order) give each merge kernel to the latest attention launch on its
    stream that started before it, and each prepare kernel to the next attention launch on its stream."""
    launches: list[Launch] = []
    last_on_stream: dict[tuple[Any, Any], Launch] = {}
    pending_prepare: dict[tuple[Any, Any], list[Kernel]] = defaultdict(list)
    for k in members:
        key = (k.device_id, k.stream_id)
        if k.family == ATTENTION:
            launch = Launch(attention=k, prepares=pending_prepare.pop(key, []))
            launches.append(launch)
            last_on_stream[key] = launch
        elif k.family == MERGE and key in last_on_stream:
            last_on_stream[key].merges.append(k)
        elif k.family == PREPARE:
            pending_prepare[key].append(k)
    return launches


def _decide(launch: Launch, step_name: str | None) -> None:
    k = launch.attention
    signal = SPLIT_SIGNAL.get(k.backend or "")
    cap_ctas = max((p.grid[0] for p in launch.prepares if p.backend == "fa3"), default=0)
    if launch.merges and cap_ctas >= 2:
        # FA3's prepare kernel runs ceil(B / 992) CTAs: past 992 requests every request keeps one split, though
        # the combine kernel still runs whenever the static split bound is above 1 (KERNELS.md §5).
        launch.split_kv = False
        launch.split_evidence = (f"{launch.merges[0].kernel} follows, but the prepare kernel ran {cap_ctas} CTAs: "
                                 f"B > {FA3_CAP_PER_PREPARE_CTA} requests, above FA3's dynamic-split cap no request "
                                 "is cut")
    elif launch.merges:
        launch.split_kv = True
        launch.split_evidence = f"{launch.merges[0].kernel} follows the launch on stream {k.stream_id}"
    elif signal == "merge":
        launch.split_kv = False
        launch.split_evidence = f"no merge/combine kernel follows the launch on stream {k.stream_id}" + (
            f" (and the prepare kernel ran {cap_ctas} CTAs: B > {FA3_CAP_PER_PREPARE_CTA}, above FA3's "
            "dynamic-split cap)" if cap_ctas >= 2 else "")
    elif signal == "never":
        launch.split_kv = False
        launch.split_evidence = f"the {k.backend} backend never splits along KV"
    else:
        launch.split_kv = None
        launch.split_evidence = f"split-KV of backend {k.backend or 'unknown'} is not visible in a trace"
    launch.phase, launch.phase_evidence = labels.phase_in_context(labels.label(k.name), range_name=step_name)


def group_steps(db: TraceDB, trace_id: int, step_pattern: str | None = None) -> tuple[list[Step], list[Launch]]:
    """Group the kernels of one trace into steps (see the module docstring). Returns the steps in start order
    and the attention launches that lie outside every range-defined step."""
    ensure_labels(db)
    db.sql(sql("step_kernel_launch"), {"trace": trace_id})
    db.sql(sql("step_ranges"), {"trace": trace_id})
    kernels = _kernels(db, trace_id)
    attention = [k for k in kernels if k.family == ATTENTION]
    chosen, info = _step_ranges(db, trace_id, len(attention), step_pattern)

    steps: list[Step] = []
    if chosen:
        range_ids = sorted(set(chosen.values()))
        members: dict[int, list[int]] = defaultdict(list)
        db.sql(sql("step_chosen_ranges"), {"range_ids": range_ids})
        for r in db.rows(sql("range_members")):
            members[r["range_id"]].append(r["kernel_id"])
        by_id = {k.kernel_id: k for k in kernels}
        for rid in range_ids:
            # Kernel ids are numbered in start order (TraceDB._insert): id order is (start_ns, kernel_id) order.
            ks = [by_id[i] for i in sorted(set(members[rid]))]
            r = info[rid]
            step = _make_step(r["name"], f"range:{r['kind']}", rid, ks)
            step.range_start_ns, step.range_end_ns, step.range_side = r["start_ns"], r["end_ns"], r["side"]
            steps.append(step)
    # Attention kernels outside every chosen range: one launch with its merge/prepare kernels each.
    covered = {k.kernel_id for s in steps for k in s.kernels}
    loose = [k for k in kernels if k.kernel_id not in covered and k.family in (ATTENTION, MERGE, PREPARE)]
    loose_steps: list[Step] = []
    current: list[Kernel] = []
    pending_prepare: list[Kernel] = []
    for k in loose:
        if k.family == ATTENTION:
            if current:
                loose_steps.append(_make_step(None, "launch", None, current))
            current, pending_prepare = pending_prepare + [k], []
        elif k.family == PREPARE:
            pending_prepare.append(k)
        elif current:
            current.append(k)
    if current:
        loose_steps.append(_make_step(None, "launch", None, current))

    unassigned: list[Launch] = []
    if any(s.launches for s in steps):
        unassigned = [x for s in loose_steps for x in s.launches]
        for x in unassigned:
            _decide(x, None)
    else:
        steps = loose_steps
    steps = [s for s in steps if s.launches]
    steps.sort(key=lambda s: (s.start_ns, s.range_id if s.range_id is not None else -1))
    for i, s in enumerate(steps):
        s.index = i
        if not s.name:
            s.name = f"{s.launches[0].attention.kernel} launch {i}"
        for launch in s.launches:
            _decide(launch, None if s.source == "launch" else s.name)
    return steps, unassigned


def _make_step(name: str | None, source: str, range_id: int | None, ks: list[Kernel]) -> Step:
    return Step(
        index=-1,
        name=name or "",
        source=source,
        range_id=range_id,
        start_ns=min((k.start_ns for k in ks), default=0),
        end_ns=max((k.end_ns for k in ks), default=0),
        kernels=ks,
        launches=_attach(ks),
    )
