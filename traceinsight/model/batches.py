"""A step's batch composition: exact from a sidecar row matched to the step, or bounded from the trace (the
launch's grid, its merge kernel's grid); and the planner's `Batch` and FA3 call options it implies."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

from traceinsight.ingest.sidecar import CALL_FIELDS, key_matches, key_tokens
from traceinsight.ingest.store import TraceDB
from traceinsight.model.engine_steps import StepInfo
from traceinsight.model.gpus import GPU
from traceinsight.model.occupancy import CUDA_CORE, FA2, FA3
from traceinsight.model.planners import Batch
from traceinsight.model.schedule import KernelThreshold, StepBatch
from traceinsight.model.steps import Kernel, Launch, Step

# Bytes per KV element by the sidecar's kv_dtype.
KV_DTYPE_BYTES: dict[str, int] = {"fp8": 1, "e4m3": 1, "e5m2": 1, "float8_e4m3fn": 1, "bf16": 2, "bfloat16": 2,
                                  "fp16": 2, "float16": 2, "half": 2, "fp32": 4, "float32": 4}


def _dtype_bytes(kv_dtype: str | None) -> int:
    return KV_DTYPE_BYTES.get((kv_dtype or "bf16").lower(), 2)


def sidecar_rows(db: TraceDB, trace_id: int) -> list[dict[str, Any]]:
    """The `batches` rows attached to the trace."""
    return db.rows("SELECT * FROM batches WHERE trace_id = $t ORDER BY step_key", {"t": trace_id})


def match_sidecar(step: Step, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The sidecar row whose key matches the step's range name (`sidecar.key_matches`; the key with the most
    tokens wins); None for steps that are not ranges or match nothing."""
    if step.source == "launch":
        return None
    best: dict[str, Any] | None = None
    for r in rows:
        if key_matches(r["step_key"], step.name):
            if best is None or len(r["step_key"].split()) > len(best["step_key"].split()):
                best = r
    return best


class SidecarIndex:
    """`match_sidecar` over many steps without scanning every row per step (a serving sidecar has a row per step:
    quadratic, 160K key comparisons for 400 steps). Each row is filed under its key's rarest token; a step looks
    at the rows filed under its name's tokens only, in the rows' order, with `match_sidecar`'s rule (the first
    of the keys with the most tokens wins)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        toks = [key_tokens(r["step_key"]) for r in rows]
        freq = Counter(t for ts in toks for t in set(ts))
        self.by_token: dict[str, list[int]] = defaultdict(list)
        self.keys: list[frozenset[str]] = []
        for i, ts in enumerate(toks):
            self.keys.append(frozenset(ts))
            if ts:  # an empty key matches nothing
                self.by_token[min(ts, key=lambda t: (freq[t], t))].append(i)

    def match(self, step: Step) -> dict[str, Any] | None:
        if step.source == "launch":
            return None
        name = frozenset(key_tokens(step.name))
        found = sorted(i for t in name for i in self.by_token.get(t, ()) if self.keys[i] <= name)
        best: dict[str, Any] | None = None
        for i in found:
            r = self.rows[i]
            if best is None or len(r["step_key"].split()) > len(best["step_key"].split()):
                best = r
        return best


def _shape_from_kernel(k: Kernel, thr: KernelThreshold | None) -> tuple[int | None, int | None]:
    """(qo_heads, kv_heads) the launch shows: CUDA-core block.y = G and grid.y = H_kv; FA2 grid.z = H_kv."""
    kv = thr.kv_heads if thr else None
    if k.backend == CUDA_CORE and kv and k.block[1]:
        return k.block[1] * kv, kv
    return None, kv


def batch_from_sidecar(row: dict[str, Any], launch: Launch, thr: KernelThreshold | None) -> StepBatch:
    q_k, kv_k = _shape_from_kernel(launch.attention, thr)
    kv_lens = tuple(int(x) for x in row["kv_lens"]) if row.get("kv_lens") is not None else None
    b = row.get("batch_size") or (len(kv_lens) if kv_lens else None)
    if row.get("log_call") is not None:
        known = [f"batch composition from FlashInfer's API log (plan() call {row['log_call']})"]
    else:
        known = [f"batch composition from the sidecar (key {row['step_key']!r})"]
    call = {k: row[f"call_{k}"] for k in CALL_FIELDS if row.get(f"call_{k}") is not None}
    if kv_lens is None:
        known.append("the sidecar gives the batch size but not the KV lengths")
    return StepBatch(
        source="sidecar",
        step_key=row["step_key"],
        batch_size=b,
        batch_size_min=b,
        batch_size_max=b,
        kv_lens=kv_lens,
        qo_heads=row.get("qo_heads") or q_k,
        kv_heads=row.get("kv_heads") or kv_k,
        head_dim=row.get("head_dim") or launch.attention.params.get("head_dim"),
        page_size=row.get("page_size"),
        kv_dtype=row.get("kv_dtype"),
        backend=row.get("backend"),
        cuda_graph=row.get("cuda_graph"),
        planned_split_kv=row.get("planned_split_kv"),
        planned_padded_batch=row.get("planned_padded_batch"),
        known=tuple(known),
        call=call or None,
        planned_splits=tuple(int(x) for x in row["planned_splits"]) if row.get("planned_splits") else None,
        planned_num_splits=row.get("planned_num_splits"),
    )


def batch_from_trace(launch: Launch, thr: KernelThreshold | None, cuda_graph: bool, gpu: GPU,
                     merge_occ: int | None) -> StepBatch:
    """Bounds on the batch from the launch alone (KERNELS.md §6)."""
    k = launch.attention
    q_k, kv_k = _shape_from_kernel(k, thr)
    lo: int | None = None
    hi: int | None = None
    exact: int | None = None
    known: list[str] = []
    split = launch.split_kv
    if k.backend == CUDA_CORE and not cuda_graph:
        if split is False:
            exact = k.grid[0]
            known.append(f"split-KV off (no merge kernel), so grid.x = {k.grid[0]} = B exactly")
        elif split is True:
            hi = k.grid[0] - 1
            lo = 1
            known.append(f"split-KV on (merge kernel follows): grid.x = {k.grid[0]} counts work items, so "
                         f"B <= {hi}")
            m = _merge_bound(launch, q_k, gpu, merge_occ)
            if m:
                lo, hi2, why = m
                hi = min(hi, hi2)
                known.append(why)
    elif k.backend == CUDA_CORE and cuda_graph:
        if split is False:
            exact = k.grid[0]
            known.append(f"CUDA graph without split: grid.x = {k.grid[0]} = B")
        else:
            known.append("CUDA graph with split: grid.x is padded to max_grid / H_kv and says nothing about B")
    elif k.backend == FA2:
        if split is False and not cuda_graph:
            exact = k.grid[0]
            known.append(f"split-KV off, one query tile per request (G <= 16): grid.x = {k.grid[0]} = B")
        elif split is True and not cuda_graph:
            hi = max(k.grid[0] - 1, 1)
            lo = 1
            known.append(f"split-KV on: grid.x = {k.grid[0]} work items, so B <= {hi}")
    else:
        known.append(f"the {k.backend or 'unknown'} backend's grid {tuple(k.grid)} does not reveal the batch size")
    if thr and thr.b_threshold and split is True and (hi is None or hi >= thr.b_threshold):
        hi = thr.b_threshold - 1
        lo = lo or 1
        known.append(f"split-KV was on, so B < B_th = {thr.b_threshold}")
    if exact is not None:
        lo = hi = exact
    known.append("KV lengths unknown without a sidecar; the launch's duration is the only hint of the longest "
                 "request")
    return StepBatch(
        source="trace", step_key=None, batch_size=exact, batch_size_min=lo, batch_size_max=hi, kv_lens=None,
        qo_heads=q_k, kv_heads=kv_k, head_dim=k.params.get("head_dim"), cuda_graph=cuda_graph,
        planned_split_kv=split, known=tuple(known),
    )


def with_engine(sb: StepBatch, info: StepInfo) -> StepBatch:
    """The batch completed by what the engine's iteration annotation says: its batch size is exact (a sidecar's
    stays), and the phase, query and KV token counts and request counts are the engine's."""
    f = info.fields()
    b = sb.batch_size if sb.source == "sidecar" and sb.batch_size is not None else f.get("batch_size")
    known = list(sb.known)
    said = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in f.items() if k in ENGINE_SAYS)
    if said:
        known.insert(0, f"{said} from the engine's step annotation ({info.engine})")
    if b is not None and sb.source != "sidecar":
        known = [k for k in known if "does not reveal the batch size" not in k]
    return replace(
        sb, batch_size=b if b is not None else sb.batch_size,
        batch_size_min=b if b is not None else sb.batch_size_min,
        batch_size_max=b if b is not None else sb.batch_size_max,
        engine=info.engine, phase=info.phase, query_tokens=f.get("query_tokens"), kv_tokens=f.get("kv_tokens"),
        prefill_requests=f.get("prefill_requests"), decode_requests=f.get("decode_requests"), known=tuple(known))


# What `with_engine` quotes of an annotation, in this order.
ENGINE_SAYS = ("phase", "batch_size", "query_tokens", "kv_tokens", "prefill_requests", "decode_requests")


def trace_batch_key(launch: Launch, thr: KernelThreshold | None, cuda_graph: bool, merge_occ: int | None
                    ) -> tuple[Any, ...]:
    """Everything `batch_from_trace` reads of its arguments (the GPU aside, one per trace): launches with equal
    keys get equal batches, so a long trace builds one per distinct launch shape instead of one per step. Of the
    threshold, the two fields it reads (hashing the whole dataclass, twice per step, was a tenth of the stage)."""
    k = launch.attention
    return (k.backend, k.grid, k.block[1], k.params.get("head_dim"), launch.split_kv,
            (thr.kv_heads, thr.b_threshold) if thr is not None else None, cuda_graph, merge_occ,
            launch.merges[0].grid[0] if launch.merges else None)


def _merge_bound(launch: Launch, qo_heads: int | None, gpu: GPU, merge_occ: int | None
                 ) -> tuple[int, int, str] | None:
    """B from FlashInfer's merge grid num_SM * min(occ_merge, ceil(B * H_q / num_SM)) when below the cap."""
    if not launch.merges or not qo_heads or not merge_occ:
        return None
    gx = launch.merges[0].grid[0]
    if gx % gpu.num_sms:
        return None
    m = gx // gpu.num_sms
    if m >= merge_occ:
        return None
    lo = ((m - 1) * gpu.num_sms) // qo_heads + 1
    hi = (m * gpu.num_sms) // qo_heads
    return lo, hi, (f"merge grid {gx} = {m} x {gpu.num_sms} SMs (below its occupancy {merge_occ}) means "
                    f"B x {qo_heads} query heads is in ({(m - 1) * gpu.num_sms}, {m * gpu.num_sms}]: "
                    f"{lo} <= B <= {hi}")


def planner_batch(sb: StepBatch) -> Batch | None:
    """The planner's Batch for a sidecar batch with KV lengths and a full shape; None otherwise. FA3 needs no
    page size (its unit is the kBlockN KV block): a batch without one is read at token granularity."""
    page = sb.page_size or (1 if sb.backend == FA3 else None)
    if sb.kv_lens is None or not sb.kv_lens or not sb.qo_heads or not sb.kv_heads or not page:
        return None
    if sb.qo_heads % sb.kv_heads:
        return None
    return Batch(kv_lens=sb.kv_lens, page_size=page, qo_heads=sb.qo_heads, kv_heads=sb.kv_heads,
                 head_dim=sb.head_dim or 128, kv_dtype_bytes=_dtype_bytes(sb.kv_dtype))


def fa3_options(k: Kernel, sb: StepBatch | None) -> dict[str, Any]:
    """FA3Options for a launch: kBlockM / kBlockN from the kernel's template, and what the call asked for
    (forced num_splits, sm_margin, causal, pack_gqa, max_seqlen_k) when a sidecar recorded it."""
    out: dict[str, Any] = {}
    for key, name in (("block_m", "kBlockM"), ("block_n", "kBlockN")):
        v = k.params.get(name)
        if isinstance(v, int) and v > 0:
            out[key] = v
    call = (sb.call if sb is not None else None) or {}
    for key in ("num_splits", "sm_margin", "max_seqlen_k"):
        if isinstance(call.get(key), int):
            out[key] = call[key]
    for key in ("causal", "pack_gqa"):
        if isinstance(call.get(key), bool):
            out[key] = call[key]
    return out
