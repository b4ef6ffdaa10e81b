"""FlashAttention-3 (Hopper) varlen paged decode: static split bound, per-request dynamic split, tile order.

Restated from Dao-AILab/flash-attention `hopper/heuristics.h` (`num_splits_heuristic`), `flash_api.cpp`
(`get_num_splits`) and `flash_prepare_scheduler.cu` (`prepare_varlen_num_blocks`), plus the vLLM/SGLang fork's
heuristic variant. Persistent grid of (num_SM - sm_margin) CTAs pulling tiles from an atomic counter in
"virtual batch" order (requests sorted by work, longest first); a tile is (request, KV head, split).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from traceinsight.model.gpus import GPU
from traceinsight.model.occupancy import FA3, FA3_MAX_DYNAMIC_SPLIT_BATCH
from traceinsight.model.planners.types import Batch, Plan, WorkItem, ceil_div, work_items

L2_ASSUMED_BYTES = 50 * 1024 * 1024  # FA3's assumed L2 size in the split heuristic


@dataclass(frozen=True)
class FA3Options:
    """Knobs of an FA3 build/call.

    block_m / block_n: kBlockM / kBlockN of the kernel (128/128 upstream for D=128 paged; the vLLM/SGLang
    fork uses kBlockM 64); max_seqlen_k: tokens the static heuristic assumes (page-table width * page size;
    None: the longest request rounded up to whole pages); sm_margin: SMs left out of the persistent grid;
    variant: 'upstream' or 'fork' heuristic; max_splits: upper bound on splits; sort: order requests longest
    first (the prepare kernel's Sort=true); causal: causal/local masking (disables the L2 split branch);
    num_splits: the call's num_splits (0: the heuristic picks the static bound S; k > 0: S = k, the per-request
    dynamic split still cuts each request into at most k); pack_gqa: the call's pack_gqa (None: as FA3 decides,
    which packs whenever S > 1 — a tile row then covers a KV head's G query heads; unpacked, every query head is
    its own tile).
    """

    block_m: int = 128
    block_n: int = 128
    max_seqlen_k: int | None = None
    sm_margin: int = 0
    variant: str = "upstream"
    max_splits: int = 128
    sort: bool = True
    causal: bool = False
    num_splits: int = 0
    pack_gqa: bool | None = None


def num_splits_heuristic(
    total_mblocks: int,
    num_sms: int,
    num_n_blocks: int,
    num_m_blocks: int,
    size_one_kv_head: int,
    causal: bool,
    max_splits: int,
    variant: str = "upstream",
) -> int:
    """FA3's static split count S (upstream, or the vLLM/SGLang fork when variant == 'fork')."""
    if total_mblocks >= 0.8 * num_sms:
        if size_one_kv_head > L2_ASSUMED_BYTES and num_m_blocks >= num_sms * 2 and not causal:
            return min(ceil_div(size_one_kv_head, L2_ASSUMED_BYTES), max_splits)
        return 1
    if num_n_blocks <= 4:
        return 1
    if variant == "fork" and num_n_blocks <= 8 and total_mblocks >= 32:
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)
    effs = []
    for s in range(1, max_splits + 1):
        waves = total_mblocks * s / num_sms
        eff = waves / math.ceil(waves)
        if variant == "fork" and num_n_blocks // s < 4:
            eff *= 0.85
        effs.append(eff)
    best = max(effs)
    ratio = 0.95 if variant == "fork" else 0.85
    for s, eff in enumerate(effs, start=1):
        if eff >= ratio * best:
            return s
    return 1


def _tiles(order: list[int], m_blocks: list[int], splits: list[int], n_blocks: list[int], kv_lens: tuple[int, ...],
           h_kv: int, block_n: int) -> list[WorkItem]:
    """FA3's tiles in pull order: for each request of `order`, each query tile, each KV head, each split s, the KV
    range [min(s * per_split, kv_len), + max(min(per_split, kv_len - start), 0)) with per_split =
    ceil(n_blocks / splits) * block_n; the CTA index is the tile's position."""
    if not order:
        return []
    o = np.array(order, dtype=np.int64)
    mb = np.array(m_blocks, dtype=np.int64)[o]
    sp = np.array(splits, dtype=np.int64)[o]
    nb = np.array(n_blocks, dtype=np.int64)[o]
    kv = np.array(kv_lens, dtype=np.int64)[o]
    per_split = -(-nb // sp) * block_n
    count = mb * h_kv * sp  # tiles per request
    total = int(count.sum())
    first = np.cumsum(count) - count
    pos = np.arange(total, dtype=np.int64)
    within = pos - np.repeat(first, count)  # (q_tile * h_kv + head) * splits + s
    sp_r = np.repeat(sp, count)
    split = within % sp_r
    head = (within // sp_r) % h_kv
    q_tile = within // (sp_r * h_kv)
    per_r = np.repeat(per_split, count)
    kv_r = np.repeat(kv, count)
    start = np.minimum(split * per_r, kv_r)
    tokens = np.maximum(np.minimum(per_r, kv_r - start), 0)
    return work_items(zip(np.repeat(o, count).tolist(), head.tolist(), split.tolist(), start.tolist(),
                          tokens.tolist(), repeat(None, total), q_tile.tolist(), pos.tolist(), repeat(None, total),
                          strict=True))


def plan_fa3(batch: Batch, gpu: GPU, occ: int, cuda_graph: bool = False, options: FA3Options | None = None) -> Plan:
    """Plan FA3's varlen decode for `batch` (pack-GQA: one tile row covers a KV head's G query heads).

    occ is recorded only (one CTA per SM). cuda_graph does not change the schedule.
    """
    opt = options or FA3Options()
    b = batch.batch_size
    g = batch.group_size
    h_kv = batch.kv_heads
    num_sms = gpu.num_sms - opt.sm_margin
    seqlen_k = opt.max_seqlen_k
    if seqlen_k is None:
        seqlen_k = ceil_div(max(batch.kv_lens), batch.page_size) * batch.page_size
    max_q = max(batch.query_lens)
    m_blocks_static = ceil_div(max_q * g, opt.block_m)
    n_blocks_static = ceil_div(seqlen_k, opt.block_n)
    size_one_kv_head = seqlen_k * 2 * batch.head_dim * batch.kv_dtype_bytes
    static_s = opt.num_splits if opt.num_splits > 0 else num_splits_heuristic(
        h_kv * m_blocks_static,
        num_sms,
        n_blocks_static,
        m_blocks_static,
        size_one_kv_head,
        opt.causal,
        opt.max_splits,
        opt.variant,
    )
    # PackGQA as the call asks; else FA3's get_pack_gqa: always with a split, and for decode (one query row, G > 1)
    # should_pack_gqa packs too. Unpacked, each query head is its own tile.
    packed = opt.pack_gqa if opt.pack_gqa is not None else (static_s > 1 or g > 1)
    if not packed:
        g, h_kv = 1, batch.qo_heads
    m_blocks = [ceil_div(q * g, opt.block_m) for q in batch.query_lens]
    n_blocks = [ceil_div(n, opt.block_n) for n in batch.kv_lens]
    dynamic = static_s > 1 and b <= FA3_MAX_DYNAMIC_SPLIT_BATCH
    blocks_per_sm = 0
    if dynamic:
        total = sum(m * n for m, n in zip(m_blocks, n_blocks, strict=True))
        blocks_per_sm = max(math.ceil(total * 1.1 * h_kv / num_sms), 1)
        splits = [min(max(ceil_div(n, blocks_per_sm), 1), static_s) for n in n_blocks]
    else:
        splits = [1] * b
    # The prepare kernel sorts the requests of each of its CTAs (992 requests apiece) by KV blocks per split,
    # most first (a stable merge sort): the "virtual batch" order in which the persistent CTAs pull tiles.
    order: list[int] = []
    for lo in range(0, b, FA3_MAX_DYNAMIC_SPLIT_BATCH):
        chunk = list(range(lo, min(b, lo + FA3_MAX_DYNAMIC_SPLIT_BATCH)))
        if opt.sort:
            chunk.sort(key=lambda i: -ceil_div(n_blocks[i], splits[i]))
        order.extend(chunk)
    # Tiles in pull order: per request, query tile, KV head, split; the CTA index is the position in that order.
    # Built as int64 columns (a serving batch has 10^4 tiles per launch), then made WorkItems at C speed.
    items = _tiles(order, m_blocks, splits, n_blocks, batch.kv_lens, h_kv, opt.block_n)
    return Plan(
        backend=FA3,
        batch=batch,
        work_items=tuple(items),
        chunk_tokens=None,
        split_kv=any(s > 1 for s in splits),
        padded_batch_size=None,
        grid=(num_sms, 1, 1),
        merge=static_s > 1,
        persistent=True,
        max_grid=num_sms,
        splits=tuple(splits),
        details={
            "occupancy": occ,
            "num_splits_static": static_s,
            "blocks_per_sm": blocks_per_sm,
            "dynamic_split": dynamic,
            "block_m": opt.block_m,
            "block_n": opt.block_n,
            "pack_gqa": packed,
            "forced_num_splits": opt.num_splits or None,
            "cuda_graph": cuda_graph,
        },
    )
