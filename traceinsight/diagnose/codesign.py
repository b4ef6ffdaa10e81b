"""Model co-design arithmetic: attention's arithmetic intensity in decode and prefill, the roofline floor of a
decode step, and the checks of a model shape against the GPU (TP vs KV heads, head_dim alignment, GQA group).

Derivation (per KV head, one request; D = head_dim, G = query heads per KV head, L = KV length in tokens,
S = prompt length, b_kv / b_q = bytes per KV / query-and-output element):
- decode reads K and V once (2·L·D·b_kv bytes), reads G query rows and writes G output rows (2·G·D·b_q) and
  does two matrix products of G×D by D×L (QKᵀ, then P·V): 4·G·L·D FLOPs. So
  AI_decode = 4·G·L·D / (2·L·D·b_kv + 2·G·D·b_q) = 2·G·L / (L·b_kv + G·b_q)  →  2·G / b_kv for L ≫ G:
  about 2·G FLOP/byte with an 8-bit KV cache, G with bf16. Doubling G doubles it; D cancels out.
- prefill of S tokens reads/writes S rows of Q and O per query head and S rows of K and V:
  bytes = 2·S·D·(b_kv + G·b_q); FLOPs = 4·G·S²·D (halved with a causal mask), so
  AI_prefill = 2·G·S / (b_kv + G·b_q) (× 1/2 causal): it grows with S, and prefill is compute-bound.
Tensor parallelism shards heads, not tokens: each of TP ranks holds H_q / TP query heads and H_kv / TP KV heads;
once TP > H_kv a KV head cannot be split, so every rank keeps a whole copy of one KV head for fewer query heads:
KV memory and HBM traffic are duplicated TP / H_kv times and the local group shrinks to G · H_kv / TP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# Bytes per element of the KV cache / query dtypes accepted.
DTYPE_BYTES: dict[str, int] = {"fp8": 1, "e4m3": 1, "e5m2": 1, "bf16": 2, "fp16": 2, "fp32": 4}
# Peak dense tensor-core throughput (FLOP/s) per GPU table key, by the datasheets (no sparsity), for the
# ridge point of the roofline: {key: {"bf16": ..., "fp8": ...}}.
PEAK_DENSE_FLOPS: dict[str, dict[str, float]] = {
    "h200": {"bf16": 989e12, "fp8": 1979e12},
    "h100-sxm": {"bf16": 989e12, "fp8": 1979e12},
    "h100-nvl": {"bf16": 835e12, "fp8": 1671e12},
    "h100-pcie": {"bf16": 756e12, "fp8": 1513e12},
    "h20": {"bf16": 148e12, "fp8": 296e12},
    "b200": {"bf16": 2250e12, "fp8": 4500e12},
    "a100-80gb-sxm": {"bf16": 312e12},
    "a100-80gb-pcie": {"bf16": 312e12},
    "a100-40gb": {"bf16": 312e12},
    "l40s": {"bf16": 362e12, "fp8": 733e12},
    "v100": {"bf16": 125e12},
}
# Tile width attention kernels compute head_dim in (GPU MMA tiles and 128-byte memory transactions).
HEAD_DIM_TILE = 128
# head_dim at or above this approaches the tensor-memory budget of Blackwell attention kernels.
HEAD_DIM_TMEM_LIMIT = 512
# A GQA group (query heads per KV head, per GPU) below this leaves decode deeply memory-bound.
SMALL_GROUP_SIZE = 4


@dataclass(frozen=True)
class Shape:
    """An attention layer's shape for the whole model (before tensor parallelism) and its TP degree.

    qo_heads / kv_heads: query and KV heads of the model; head_dim: elements per head; tp: tensor-parallel
    ranks the heads are sharded over; kv_dtype / q_dtype: 'bf16' | 'fp16' | 'fp8' | 'fp32'.
    """

    qo_heads: int
    kv_heads: int
    head_dim: int
    tp: int = 1
    kv_dtype: str = "bf16"
    q_dtype: str = "bf16"

    def __post_init__(self) -> None:
        for name in ("qo_heads", "kv_heads", "head_dim", "tp"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.qo_heads % self.kv_heads:
            raise ValueError(f"qo_heads {self.qo_heads} is not a multiple of kv_heads {self.kv_heads}")
        for name in ("kv_dtype", "q_dtype"):
            if getattr(self, name) not in DTYPE_BYTES:
                raise ValueError(f"{name} {getattr(self, name)!r} unknown (known: {', '.join(DTYPE_BYTES)})")

    @property
    def group_size(self) -> int:
        """G of the model: query heads per KV head."""
        return self.qo_heads // self.kv_heads

    @property
    def local_qo_heads(self) -> int:
        """Query heads per rank: ceil(H_q / TP)."""
        return math.ceil(self.qo_heads / self.tp)

    @property
    def local_kv_heads(self) -> int:
        """KV heads per rank: H_kv / TP, but at least one whole head (copied when TP > H_kv)."""
        return max(1, math.ceil(self.kv_heads / self.tp))

    @property
    def local_group_size(self) -> float:
        """Query heads per KV head on one rank (G · H_kv / TP once TP > H_kv)."""
        return self.local_qo_heads / self.local_kv_heads

    @property
    def kv_replication(self) -> float:
        """How many ranks hold a copy of each KV head (1 when TP <= H_kv)."""
        return max(1.0, self.tp / self.kv_heads)

    @property
    def kv_bytes(self) -> int:
        return DTYPE_BYTES[self.kv_dtype]

    @property
    def q_bytes(self) -> int:
        return DTYPE_BYTES[self.q_dtype]

    def kv_bytes_per_token_per_rank(self) -> int:
        """K and V bytes one rank stores (and a decode step reads) per token and layer."""
        return 2 * self.head_dim * self.local_kv_heads * self.kv_bytes


def decode_intensity(group: float, kv_len: int | None, kv_bytes: int, q_bytes: int) -> float:
    """FLOP per HBM byte of one decode step: 2·G·L / (L·b_kv + G·b_q); `kv_len` None: the limit L → ∞,
    2·G / b_kv."""
    if kv_len is None:
        return 2.0 * group / kv_bytes
    return 2.0 * group * kv_len / (kv_len * kv_bytes + group * q_bytes)


def prefill_intensity(group: float, prompt_len: int, kv_bytes: int, q_bytes: int, causal: bool = False) -> float:
    """FLOP per HBM byte of prefilling `prompt_len` tokens: 2·G·S / (b_kv + G·b_q), halved when causal."""
    ai = 2.0 * group * prompt_len / (kv_bytes + group * q_bytes)
    return ai / 2 if causal else ai


def decode_step_kv_bytes(shape: Shape, kv_lens_total_tokens: int) -> int:
    """KV bytes one rank reads in one decode step of one layer holding `kv_lens_total_tokens` tokens."""
    return kv_lens_total_tokens * shape.kv_bytes_per_token_per_rank()


@dataclass(frozen=True)
class Check:
    """One co-design check. ok False means it found a problem; severity is 'warning' or 'info'."""

    name: str
    ok: bool
    severity: str
    message: str
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "severity": self.severity, "message": self.message,
                "reason": self.reason, "evidence": self.evidence}


def checks(shape: Shape) -> list[Check]:
    """The co-design checks of `shape`, passed or not, in a fixed order."""
    out: list[Check] = []
    g = shape.group_size
    dup = shape.kv_replication
    out.append(Check(
        "tp-vs-kv-heads", shape.tp <= shape.kv_heads,
        "warning",
        (f"TP {shape.tp} > {shape.kv_heads} KV heads: each KV head is stored on {dup:g} GPUs"
         if shape.tp > shape.kv_heads else f"TP {shape.tp} <= {shape.kv_heads} KV heads: no KV duplication"),
        "Tensor parallelism shards heads, not tokens. With more ranks than KV heads a KV head cannot be split, so "
        "several ranks keep a full copy of the same KV head: KV-cache memory and the HBM bytes read per decoded "
        f"token grow {dup:g}x across the group, and each rank's GQA group shrinks from {g} to "
        f"{shape.local_group_size:g} query heads per KV head, halving decode arithmetic intensity for every "
        "doubling of TP beyond H_kv. Keep TP <= H_kv for attention; scale further with attention data "
        "parallelism (shard requests) or KV/context parallelism (shard long sequences).",
        {"tp": shape.tp, "kv_heads": shape.kv_heads, "kv_replication": dup,
         "local_group_size": shape.local_group_size},
    ))
    divisible = shape.qo_heads % shape.tp == 0 and (shape.kv_heads % shape.tp == 0 or shape.tp % shape.kv_heads == 0)
    out.append(Check(
        "tp-divides-heads", divisible, "warning",
        (f"TP {shape.tp} divides the heads evenly" if divisible
         else f"TP {shape.tp} does not divide {shape.qo_heads} query / {shape.kv_heads} KV heads evenly"),
        "Each rank must hold whole heads and whole GQA groups; uneven sharding leaves ranks with different work "
        "(the slowest rank sets the step time) or is rejected by the serving engine.",
        {"tp": shape.tp, "qo_heads": shape.qo_heads, "kv_heads": shape.kv_heads},
    ))
    padded = math.ceil(shape.head_dim / HEAD_DIM_TILE) * HEAD_DIM_TILE
    aligned = shape.head_dim % HEAD_DIM_TILE == 0
    out.append(Check(
        "head-dim-multiple-of-128", aligned, "warning",
        (f"head_dim {shape.head_dim} is a multiple of {HEAD_DIM_TILE}" if aligned
         else f"head_dim {shape.head_dim} is not a multiple of {HEAD_DIM_TILE}: kernels pay for {padded}"),
        f"Attention kernels compute head_dim in {HEAD_DIM_TILE}-wide tiles and GPUs move memory in 128-byte "
        "transactions; a partly filled tile costs as much as a full one, so a head_dim of "
        f"{shape.head_dim} runs at the cost of {padded} ({padded / shape.head_dim:.2f}x) without changing the "
        "arithmetic intensity. 128 and 256 are the efficient choices.",
        {"head_dim": shape.head_dim, "padded_head_dim": padded, "cost_factor": round(padded / shape.head_dim, 4)},
    ))
    out.append(Check(
        "head-dim-tmem", shape.head_dim < HEAD_DIM_TMEM_LIMIT, "info",
        (f"head_dim {shape.head_dim} < {HEAD_DIM_TMEM_LIMIT}" if shape.head_dim < HEAD_DIM_TMEM_LIMIT
         else f"head_dim {shape.head_dim} >= {HEAD_DIM_TMEM_LIMIT} nears the tensor-memory budget"),
        f"At head_dim >= {HEAD_DIM_TMEM_LIMIT} the accumulators of Blackwell attention kernels approach the tensor "
        "memory (TMEM) capacity, which limits tiling and pipelining.",
        {"head_dim": shape.head_dim},
    ))
    lg = shape.local_group_size
    ai = decode_intensity(lg, None, shape.kv_bytes, shape.q_bytes)
    out.append(Check(
        "group-size", lg >= SMALL_GROUP_SIZE, "info",
        (f"GQA group {lg:g} per GPU: decode does {ai:g} FLOP per KV byte" if lg >= SMALL_GROUP_SIZE
         else f"small GQA group {lg:g} per GPU: decode does only {ai:g} FLOP per KV byte"),
        "Decode reads every KV byte once per step and does about 2·G FLOPs per KV element with it, so its "
        "arithmetic intensity is about 2·G / (bytes per KV element), far below any GPU's ridge point: the step "
        "time is set by KV bytes. A larger group G (fewer KV heads for the same query heads) cuts the KV bytes "
        "per token and speeds decode nearly proportionally; prefill hardly depends on G.",
        {"local_group_size": lg, "decode_flop_per_byte": round(ai, 4), "min_group_size": SMALL_GROUP_SIZE},
    ))
    return out


def ridge_point(gpu_key: str | None, hbm_bytes_per_s: float | None, dtype: str) -> float | None:
    """FLOP per byte at which the GPU turns compute-bound (peak dense FLOP/s of `dtype` over HBM bandwidth);
    None when either is unknown. fp8 falls back to bf16 on GPUs without fp8 tensor cores."""
    if not gpu_key or not hbm_bytes_per_s:
        return None
    peaks = PEAK_DENSE_FLOPS.get(gpu_key)
    if not peaks:
        return None
    key = "fp8" if DTYPE_BYTES.get(dtype) == 1 else "bf16"
    peak = peaks.get(key, peaks.get("bf16"))
    return peak / hbm_bytes_per_s if peak else None


# Device memory per GPU (bytes), from the product datasheets: what the KV cache, weights and activations share.
GIB = 1 << 30
GB = 10**9
GPU_MEMORY_BYTES: dict[str, int] = {
    "h200": 141 * GB, "h20": 96 * GB, "h100-pcie": 80 * GB, "h100-nvl": 94 * GB, "h800": 80 * GB,
    "h100-sxm": 80 * GB, "gb200": 186 * GB, "b300": 288 * GB, "b200": 180 * GB, "a100-80gb-pcie": 80 * GB,
    "a100-80gb-sxm": 80 * GB, "a100-40gb": 40 * GB, "l40s": 48 * GB, "l4": 24 * GB, "a10g": 24 * GB,
    "rtx-4090": 24 * GB, "rtx-5090": 32 * GB, "mi355x": 288 * GB, "mi325x": 256 * GB, "mi300x": 192 * GB,
    "mi210": 64 * GB, "v100": 32 * GB,
}
# Share of device memory the KV cache may take (the rest holds weights, activations and the runtime; serving
# engines default to about 0.9 of memory for weights + KV, so the KV cache is often far less).
KV_MEMORY_FRACTION = 0.9


def kv_memory(shape: Shape, gpu_key: str | None, kv_tokens: int, layers: int) -> dict[str, Any] | None:
    """The KV cache of `kv_tokens` tokens over `layers` layers on one GPU against its memory: bytes needed,
    device memory, the share it takes, whether it fits under KV_MEMORY_FRACTION, and the most tokens that do.
    None when the GPU's memory is not in GPU_MEMORY_BYTES."""
    mem = GPU_MEMORY_BYTES.get(gpu_key or "")
    if mem is None:
        return None
    per_token = shape.kv_bytes_per_token_per_rank() * layers
    need = per_token * kv_tokens
    budget = int(mem * KV_MEMORY_FRACTION)
    return {"kv_cache_bytes": need, "gpu_memory_bytes": mem, "share": need / mem, "fits": need <= budget,
            "budget_bytes": budget, "max_kv_tokens": budget // per_token if per_token else None,
            "kv_bytes_per_token_all_layers": per_token}


def report(
    shape: Shape,
    hbm_bytes_per_s: float | None,
    gpu_key: str | None,
    kv_len: int | None = None,
    batch: int | None = None,
    layers: int = 1,
) -> dict[str, Any]:
    """Everything `traceinsight codesign` prints, as a JSON-ready dict (ns, bytes, FLOP/byte)."""
    lg = shape.local_group_size
    out: dict[str, Any] = {
        "shape": {
            "qo_heads": shape.qo_heads, "kv_heads": shape.kv_heads, "head_dim": shape.head_dim, "tp": shape.tp,
            "kv_dtype": shape.kv_dtype, "q_dtype": shape.q_dtype, "group_size": shape.group_size,
            "local_qo_heads": shape.local_qo_heads, "local_kv_heads": shape.local_kv_heads,
            "local_group_size": lg, "kv_replication": shape.kv_replication,
        },
        "decode_flop_per_byte_limit": decode_intensity(lg, None, shape.kv_bytes, shape.q_bytes),
        "decode_flop_per_byte": (decode_intensity(lg, kv_len, shape.kv_bytes, shape.q_bytes)
                                 if kv_len else None),
        "prefill_flop_per_byte": (prefill_intensity(lg, kv_len, shape.kv_bytes, shape.q_bytes)
                                  if kv_len else None),
        "prefill_causal_flop_per_byte": (prefill_intensity(lg, kv_len, shape.kv_bytes, shape.q_bytes, causal=True)
                                         if kv_len else None),
        "ridge_flop_per_byte": ridge_point(gpu_key, hbm_bytes_per_s, shape.kv_dtype),
        "hbm_bandwidth_bytes_per_s": hbm_bytes_per_s,
        "kv_bytes_per_token_per_gpu": shape.kv_bytes_per_token_per_rank(),
        "step": None,
        "checks": [c.to_json() for c in checks(shape)],
    }
    if kv_len and batch:
        tokens = kv_len * batch
        per_layer = decode_step_kv_bytes(shape, tokens)
        floor = per_layer * layers / hbm_bytes_per_s * 1e9 if hbm_bytes_per_s else None
        out["step"] = {
            "batch": batch, "kv_len": kv_len, "kv_tokens": tokens, "layers": layers,
            "kv_bytes_per_gpu": per_layer * layers,
            "roofline_floor_ns": round(floor) if floor is not None else None,
        }
        mem = kv_memory(shape, gpu_key, tokens, layers)
        out["memory"] = mem
        if mem is not None:
            gb = 1e9
            ok = mem["fits"]
            out["checks"].append(Check(
                name="kv-fits-memory", ok=ok, severity="warning",
                message=(f"KV cache of {batch} x {kv_len:,} tokens x {layers} layer(s): "
                            f"{mem['kv_cache_bytes'] / gb:,.1f} GB per GPU, {mem['share']:.0%} of its "
                            f"{mem['gpu_memory_bytes'] / gb:.0f} GB"
                            + ("" if ok else f": does not fit (at most {mem['max_kv_tokens']:,} tokens in "
                                             f"{KV_MEMORY_FRACTION:.0%} of memory, before weights)")),
                reason=("The KV cache shares device memory with the weights and activations; this counts the "
                        f"cache alone against {KV_MEMORY_FRACTION:.0%} of memory. "
                        + ("" if ok else "Lower the batch or the context, quantize the KV cache (fp8 halves "
                                         "it), or spread the KV heads over more GPUs (TP up to H_kv).")),
                evidence={k: v for k, v in mem.items() if k != "share"} | {"share": round(mem["share"], 4)},
            ).to_json())
    return out
