"""Attach the schedule model to a trace's steps: per attention kernel variant its occupancy and split-KV
threshold; per step its batch composition (from a sidecar, or bounded from the trace); per launch the
planner's work items and the simulated schedule; per launch the Nsight Compute measurement when one was
matched; and the GPU's idle gaps between steps. Times in ns, sizes in bytes, lengths in tokens.

Everything here reads the trace (and its sidecar / ncu rows) only; what is unknown stays None with a note
saying why, never a guess presented as a fact.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

from traceinsight.ingest.store import TraceDB
from traceinsight.model.batches import (
    SidecarIndex,
    batch_from_sidecar,
    batch_from_trace,
    fa3_options,
    planner_batch,
    sidecar_rows,
    trace_batch_key,
    with_engine,
)
from traceinsight.model.gpus import gpu_for
from traceinsight.model.idle_gaps import idle_gaps
from traceinsight.model.launch_models import cached_plan, calibrate_costs, launch_models
from traceinsight.model.log_match import is_log_row, match_log
from traceinsight.model.occupancy import BACKENDS, CUDA_CORE, FA2, FA3, occupancy_limits
from traceinsight.model.phases import PREFILL_PHASES, phase_from_query_lengths, tile_padding
from traceinsight.model.planners import Plan
from traceinsight.model.schedule import Measured, Schedule, StepBatch
from traceinsight.model.shared_objects import first_rows
from traceinsight.model.steps import Kernel, Launch, Step
from traceinsight.model.thresholds import kernel_threshold, threads_per_block
from traceinsight.queries import sql

_SHAPE = attrgetter("_shape")


# ---------------------------------------------------------------------------------------------- phases
def _phase_from_sidecar(step: Step, row: dict[str, Any]) -> None:
    """Every attention launch of the step takes the phase the sidecar's query lengths tell (decode, prefill or
    mixed), and tensor-core launches their query-tile padding."""
    qo = [int(q) for q in row["qo_lens"]]
    found = phase_from_query_lengths(qo)
    if found is None:
        return
    group = (row["qo_heads"] // row["kv_heads"]) if row.get("qo_heads") and row.get("kv_heads") else 1
    for launch in step.launches:
        launch.phase, launch.phase_evidence = found
        tile = launch.attention.params.get("cta_tile_q")
        if isinstance(tile, int) and tile > 0:
            launch.tiles = tile_padding(qo, tile, group)


def _fa3_split_state(launch: Launch, sb: StepBatch, p: Plan) -> str | None:
    """What FA3 did with the batch: split-KV is on when at least one request was cut (a combine kernel alone
    does not say so: it runs whenever the static bound S > 1, even past the 992-request cap where nothing is
    cut). From the sidecar's scheduler metadata when recorded, else from the planner replayed on the batch.

    The trace's combine kernel is evidence: FA3 launches it exactly when S > 1 (hopper/flash_api.cpp), so a launch
    with none cut nothing. A sidecar that does not state the call's num_splits (nor the scheduler's plan) leaves the
    planner assuming the heuristic: then a launch without a combine kernel is not split, whatever the replay says.
    A sidecar that states them is believed; where it contradicts the trace, the contradiction is returned (in
    words, naming both) for the trace's warnings."""
    combine = "a combine kernel follows" if launch.merges else "no combine kernel follows"
    call = sb.call or {}
    if sb.planned_splits is not None:
        cut = sum(1 for x in sb.planned_splits if x > 1)
        launch.split_kv = cut > 0
        launch.split_evidence = (f"FA3's scheduler metadata (sidecar): {cut} of {len(sb.planned_splits)} requests "
                                 f"cut, up to {max(sb.planned_splits)} splits; {combine}")
        said = (f"the sidecar's scheduler metadata ({cut} of {len(sb.planned_splits)} requests cut, static bound "
                f"S = {sb.planned_num_splits})")
        return _fa3_contradiction(launch, cut, sb.planned_num_splits, said)
    splits = p.splits or ()
    cut = sum(1 for x in splits if x > 1)
    s_static = p.details.get("num_splits_static")
    why = ("above FA3's dynamic-split cap of 992 requests nothing is cut" if not p.details.get("dynamic_split")
           and (s_static or 1) > 1 else f"static split bound S = {s_static}")
    if not isinstance(call.get("num_splits"), int) and not launch.merges:
        launch.split_kv = False
        launch.split_evidence = ("no combine kernel follows: FA3 ran one split (static bound S = 1), nothing cut; "
                                 "the sidecar does not say the call's num_splits, and FA3's planner replayed with "
                                 f"its heuristic would have cut {cut} of {len(splits)} requests ({why})")
        return None
    launch.split_kv = cut > 0
    launch.split_evidence = (f"FA3's planner replayed on the sidecar's batch: {cut} of {len(splits)} requests cut "
                             f"({why}); {combine}")
    if not isinstance(call.get("num_splits"), int):
        return None
    said = (f"the sidecar's num_splits = {call['num_splits']} (FA3's planner on its batch: {cut} of {len(splits)} "
            f"requests cut, static bound S = {s_static})")
    return _fa3_contradiction(launch, cut, s_static if isinstance(s_static, int) else None, said)


def _fa3_contradiction(launch: Launch, cut: int, s_static: int | None, said: str) -> str | None:
    """Where what the sidecar said (`said`: requests cut, static bound S) cannot be what the trace shows: requests
    cut, or S > 1, without a combine kernel; S = 1 with one."""
    if not launch.merges and (cut > 0 or (s_static or 1) > 1):
        return f"{said}, but no combine kernel ran after the launch"
    if launch.merges and s_static == 1:
        return f"{said}, but {launch.merges[0].kernel} ran after the launch"
    return None


# ---------------------------------------------------------------------------------------------- main
def _by_shape(kernels: list[Kernel]) -> list[tuple[Kernel, int]]:
    """The kernels' distinct view shapes (`Kernel._shape`, by identity) in first-seen order: the first kernel of
    each and how many kernels have it (numpy over the shapes' ids: no Python step per kernel)."""
    first, codes = first_rows(list(map(_SHAPE, kernels)))
    counts = np.bincount(codes, minlength=len(first))
    return [(kernels[i], c) for i, c in zip(first.tolist(), counts.tolist(), strict=True)]


# The properties that make devices rows one GPU model (trace_gpu.sql compares the same).
_MODEL_COLUMNS = ("name", "num_sms", "compute_major", "compute_minor", "total_mem_bytes")


def _device_row(db: TraceDB, trace_id: int, gpu_row: dict[str, Any]) -> dict[str, Any]:
    """The devices row of the GPU the trace's kernels ran on, merged over `gpu_row` (trace_gpu.sql). Kernels on a
    device id that no devices row describes use the trace's devices rows when they all describe one GPU model (the
    SGLang MI300X trace: kernels on device 9, properties under id 0 only); the device id stays the kernels'."""
    dev = gpu_row.get("device_id")
    rows = db.rows("SELECT * FROM devices WHERE trace_id = $t AND (device_id = $d OR $d IS NULL) "
                   "ORDER BY device_id LIMIT 1", {"t": trace_id, "d": dev})
    if not rows and dev is not None:
        rows = db.rows("SELECT * FROM devices WHERE trace_id = $t ORDER BY device_id", {"t": trace_id})
        one_model = len({tuple(r[c] for c in _MODEL_COLUMNS) for r in rows}) == 1
        rows = [{**rows[0], "device_id": dev}] if one_model else []
    return {**gpu_row, **(rows[0] if rows else {})}


def step_graph_modes(db: TraceDB, trace_id: int) -> tuple[dict[int, str], set[int]]:
    """Per step key (group_steps' `Step.key`), how its kernels ran under CUDA / HIP graphs: 'full' when every
    attention kernel of the step came from a graph replay, 'piecewise' when replays ran between eager attention
    kernels (step_graphs.sql); steps without a replay are left out. And the kernels that ran inside a replay.
    Leaves _kernel_replay (kernel_graph_replay.sql) in the database; a trace without graph replays skips both
    queries (every kernel ran eagerly: a row per kernel of the 1M-kernel export, and one per step, said nothing)."""
    if not db.rows("SELECT 1 FROM graph_replays WHERE trace_id = $t LIMIT 1", {"t": trace_id}):
        db.sql("DROP TABLE IF EXISTS _kernel_replay")
        return {}, set()
    db.sql("CREATE OR REPLACE TEMP TABLE _kernel_replay AS " + sql("kernel_graph_replay"), {"trace": trace_id})
    replayed = {r[0] for r in db.sql("SELECT kernel_id FROM _kernel_replay WHERE replay_id IS NOT NULL").fetchall()}
    out: dict[int, str] = {}
    if not db.rows("SELECT 1 FROM duckdb_tables() WHERE table_name = '_step_members' LIMIT 1"):
        return out, replayed  # steps not grouped on this connection (a caller that built them itself)
    for r in db.rows(sql("step_graphs"), {"trace": trace_id}):
        if r["replays"]:
            out[r["step_key"]] = "full" if r["graph_attention"] == r["attention"] else "piecewise"
    return out, replayed


def attach(db: TraceDB, trace_id: int, steps: list[Step], gpu_row: dict[str, Any]) -> Schedule:
    """Build the schedule model of one trace (see the module docstring)."""
    from traceinsight.errors import TraceInsightError

    device = _device_row(db, trace_id, gpu_row)
    gaps = idle_gaps(db, trace_id, steps, gpu_row.get("device_id"))
    try:
        gpu = gpu_for(device.get("name"), {k: v for k, v in device.items() if k != "name"})
    except TraceInsightError as exc:
        return Schedule(gpu=None, idle_gaps=gaps, notes=[f"no GPU model: {exc}"])
    sched = Schedule(gpu=gpu, idle_gaps=gaps)
    if gpu.identified_by == "properties":
        named = f"names it {device.get('name')!r}" if device.get("name") else "does not name it"
        mem = device.get("total_mem_bytes")
        sched.notes.append(
            f"GPU identified as {gpu.name} from compute capability {gpu.compute_capability[0]}."
            f"{gpu.compute_capability[1]}, {gpu.num_sms} SMs" + (f" and {mem / 2**30:.0f} GiB" if mem else "")
            + f" (the trace {named})")
    graph_ids = {r[0] for r in db.sql("SELECT kernel_id FROM kernels WHERE trace_id = $t AND graph_node_id IS NOT "
                                      "NULL", {"t": trace_id}).fetchall()}
    modes, replayed = step_graph_modes(db, trace_id)
    graph_ids |= replayed
    sched.cuda_graph_kernels = frozenset(graph_ids)
    rows = sidecar_rows(db, trace_id)
    log_rows = [r for r in rows if is_log_row(r)]
    index = SidecarIndex([r for r in rows if not is_log_row(r)])
    matched: dict[int, dict[str, Any]] = {}
    if index.rows:  # no sidecar: nothing to match (a step at a time, 229K steps on the 1M-kernel export)
        for s in steps:
            r = index.match(s)
            if r is not None:
                matched[s.index] = r
    if log_rows:  # a FlashInfer API log: by the order of its calls (model/log_match.py)
        by_log, note = match_log([s for s in steps if s.index not in matched], log_rows, sched.cuda_graph_kernels)
        matched.update(by_log)
        sched.notes.append(note)

    # (a) thresholds, one per attention kernel variant (its most common launch shape: the first launch of that
    # shape represents it). Counted over the kernels' view shapes (`kernel_columns.Kernel._shape`: one object per
    # distinct label and shared columns), not four fields read of each of 10^5-10^6 launches.
    launches = [launch for s in steps for launch in s.launches]
    shapes: dict[str, Counter[tuple[Any, ...]]] = defaultdict(Counter)
    first_of: dict[tuple[str, tuple[Any, ...]], Kernel] = {}
    for k, count in _by_shape([launch.attention for launch in launches]):
        shape = (k.grid, k.block, k.registers_per_thread, k.smem_bytes)
        shapes[k.name][shape] += count
        first_of.setdefault((k.name, shape), k)
    hint: dict[str, int] = {}
    for s in steps if matched else ():
        r = matched.get(s.index)
        if r and r.get("kv_heads"):
            for launch in s.launches:
                hint[launch.attention.name] = int(r["kv_heads"])
    merge_kernels: dict[str, Kernel] = {}  # the first kernel of each merge name
    for m, _ in _by_shape(list(chain.from_iterable(launch.merges for launch in launches))):
        merge_kernels.setdefault(m.name, m)
    del launches
    for name, counts in shapes.items():
        rep = first_of[(name, counts.most_common(1)[0][0])]
        thr = kernel_threshold(rep, gpu, hint.get(name))
        if thr is not None:
            sched.thresholds[name] = thr
    del shapes, first_of

    # Occupancy of the merge kernels (bounds B from their grid).
    merge_occ = {name: occupancy_limits(gpu, m.registers_per_thread or 0, threads_per_block(m),
                                        m.smem_bytes or 0).blocks for name, m in merge_kernels.items()}

    # (b) batch composition per step, (c) plans (one per distinct batch), calibration, simulation.
    plans: dict[int, tuple[Plan, int]] = {}
    samples: dict[str, dict[int, tuple[Plan, list[int]]]] = defaultdict(dict)
    trace_batches: dict[tuple[Any, ...], StepBatch] = {}  # batch_from_trace by trace_batch_key
    by_shape: dict[tuple[Any, ...], StepBatch] = {}  # the same by the first launch's kernels' shape objects
    fa3_clashes: list[tuple[int, str]] = []  # (step, what the sidecar said against the trace)
    for s in steps:
        if not s.launches:
            continue
        first = s.launches[0]
        thr = sched.thresholds.get(first.attention.name)
        cuda_graph = bool(graph_ids) and first.attention.kernel_id in graph_ids  # no id read without graphs
        at = s.index
        r = matched.get(at)
        if r is not None and r.get("qo_lens"):
            _phase_from_sidecar(s, r)
        if r is not None:
            sb = batch_from_sidecar(r, first, thr)
            if sb.cuda_graph is not None:
                cuda_graph = sb.cuda_graph
        else:  # by the kernels' view shapes first (what trace_batch_key reads of them), then by the key
            merge = first.merges[0] if first.merges else None
            same = (id(first.attention._shape), first.split_kv, cuda_graph, None if merge is None else id(merge._shape))
            found = by_shape.get(same)
            if found is None:
                mo = merge_occ.get(merge.name) if merge is not None else None
                key = trace_batch_key(first, thr, cuda_graph, mo)
                found = trace_batches.get(key)
                if found is None:
                    found = trace_batches[key] = batch_from_trace(first, thr, cuda_graph, gpu, mo)
                by_shape[same] = found
            sb = found
        if s.engine is not None:
            sb = with_engine(sb, s.engine)
        mode = modes.get(s.key) if modes else None  # key: a property over the steps' columns (model.steps.Step)
        if mode is not None:
            sb = replace(sb, graph_mode=mode, cuda_graph=True if sb.cuda_graph is None or r is None else sb.cuda_graph)
        sched.batches[at] = sb
        pb = planner_batch(sb) if sb.source == "sidecar" else None
        if pb is None:
            continue  # no launch of the step is planned
        for launch in s.launches:
            k = launch.attention
            t = sched.thresholds.get(k.name)
            if t is None or k.backend not in BACKENDS or launch.phase in PREFILL_PHASES:
                continue
            occ = t.occupancy if k.backend in (CUDA_CORE, FA2) else 1
            opts = fa3_options(k, sb) if k.backend == FA3 else {}
            try:
                p = cached_plan(sched.cache, k.backend, pb, gpu, occ, cuda_graph, **opts)
            except ValueError as exc:
                sched.notes.append(f"step {s.index}: planner failed ({exc})")
                continue
            plans[k.kernel_id] = (p, occ)
            samples[k.name].setdefault(id(p), (p, []))[1].append(k.dur_ns)
            if k.backend == FA3:
                clash = _fa3_split_state(launch, sb, p)
                if clash is not None:
                    fa3_clashes.append((s.index, clash))

    if fa3_clashes:
        step, clash = fa3_clashes[0]
        n = len(fa3_clashes)
        sched.warnings.append(f"FA3: the sidecar contradicts the trace in {n} launch{'es' if n > 1 else ''} "
                              f"(first, step {step}: {clash}); the sidecar's split state is reported")
    occ_by_name = {name: (t.occupancy if t.backend in (CUDA_CORE, FA2) else 1)
                   for name, t in sched.thresholds.items()}
    sched.costs, notes = calibrate_costs({n: list(v.values()) for n, v in samples.items()}, gpu, occ_by_name)
    sched.notes.extend(notes)
    sched.models = launch_models(steps, plans, gpu, sched.costs, sched.cache)

    # (d) Nsight Compute measurements matched to launches.
    try:
        from traceinsight.ingest.ncu_sm_active import sm_active

        for r in sm_active(db, trace_id):
            if r["kernel_id"] is not None and r["sm_active_max"] is not None:
                sched.measured[int(r["kernel_id"])] = Measured(int(r["ncu_id"]), r["sm_active_min"],
                                                               r["sm_active_avg"], r["sm_active_max"])
    except ImportError:  # pragma: no cover - the ncu reader ships with the package
        pass

    return sched
