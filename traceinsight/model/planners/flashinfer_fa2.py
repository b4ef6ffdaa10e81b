"""FlashInfer tensor-core decode through the FA2 prefill planner (`PrefillPlan` + `PrefillSplitQOKVIndptr`).

Restated from FlashInfer's `scheduler.cuh` (0.6.x): the decode wrapper plans a prefill with one query row per
request. max_grid = 2 * num_SM (fixed, not occupancy), M = max_grid // H_kv; cta_tile_q from
FA2DetermineCtaTileQ(avg packed query length = qo_len * G); binary-search the smallest KV chunk c (pages) in
[max(128 // P, 1), max(1, max pages)] with sum_b tiles_b * ceil(max(pages_b, 1) / c) <= M;
split_kv = cuda_graph or c < max pages. Grid (padded, 1, H_kv); linear CTA order x + padded * z.
"""

from __future__ import annotations

import numpy as np

from traceinsight.model.gpus import GPU
from traceinsight.model.occupancy import FA2, FA2_CTAS_PER_SM
from traceinsight.model.planners.types import Batch, Plan, WorkItem, ceil_div, work_items


def fa2_cta_tile_q(avg_packed_qo_len: int, head_dim: int, sm_major: int) -> int:
    """FlashInfer's FA2DetermineCtaTileQ: query rows per CTA tile (16, 64 or 128)."""
    if avg_packed_qo_len > 64 and head_dim < 256:
        return 128
    if sm_major >= 8:
        return 64 if avg_packed_qo_len > 16 else 16
    return 64


def binary_search_kv_chunk(
    cuda_graph: bool, max_batch_size_if_split: int, tiles: list[int], kv_pages: tuple[int, ...], min_chunk: int
) -> tuple[bool, int]:
    """FlashInfer's PrefillBinarySearchKVChunkSize (KV lengths in pages): (split_kv, chunk_pages)."""
    max_kv = max([1, *kv_pages])
    low, high = min_chunk, max_kv
    # The count per candidate in int64 numpy (exact: tiles and pages are far below 2^31): a serving batch has
    # 10^3 requests and the search up to ~17 candidates.
    t_arr = np.array(tiles, dtype=np.int64)
    p_arr = np.maximum(np.array(kv_pages, dtype=np.int64), 1)
    if low < high and len(t_arr) != len(p_arr):  # as zip(strict=True) in the count did
        raise ValueError("tiles and kv_pages must have one entry per request")
    while low < high:
        mid = (low + high) // 2
        n = int((t_arr * -(-p_arr // mid)).sum())
        if n > max_batch_size_if_split:
            low = mid + 1
        else:
            high = mid
    return cuda_graph or low < max_kv, low


def plan_fa2(batch: Batch, gpu: GPU, occ: int, cuda_graph: bool = False) -> Plan:
    """Plan FlashInfer's FA2 tensor-core decode (`BatchPrefillWithPagedKVCacheKernel`) for `batch`.

    occ is recorded but not used: this planner targets 2 CTAs per SM regardless of occupancy.
    cuda_graph: planned for CUDA-graph capture (always split_kv; grid.x padded to
    max(M, ceil(total_rows * G / cta_tile_q) + B - 1)).
    """
    b = batch.batch_size
    g = batch.group_size
    h_kv = batch.kv_heads
    page = batch.page_size
    pages = batch.pages
    max_grid = FA2_CTAS_PER_SM * gpu.num_sms
    m = max_grid // h_kv
    packed = [q * g for q in batch.query_lens]
    total_rows = sum(batch.query_lens)
    if cuda_graph:
        max_seq_len = total_rows - b + 1
        cta_tile_q = fa2_cta_tile_q(max_seq_len * g, batch.head_dim, gpu.compute_capability[0])
        total_tiles_q = ceil_div(total_rows * g, cta_tile_q) + b - 1
    else:
        cta_tile_q = fa2_cta_tile_q(sum(packed) // b, batch.head_dim, gpu.compute_capability[0])
        total_tiles_q = sum(ceil_div(p, cta_tile_q) for p in packed)
    tiles = [ceil_div(p, cta_tile_q) for p in packed]
    split_kv, chunk_pages = binary_search_kv_chunk(cuda_graph, m, tiles, pages, max(128 // page, 1))
    chunk_tokens = chunk_pages * page
    per_request: list[list[tuple[int, int, int, int]]] = []  # (q_tile, chunk, start, tokens)
    splits: list[int] = []
    for req, kv_len in enumerate(batch.kv_lens):
        n_chunks = ceil_div(max(ceil_div(kv_len, page), 1), chunk_pages)
        splits.append(n_chunks)
        entries = []
        for q_tile in range(tiles[req]):
            for c in range(n_chunks):
                start = c * chunk_tokens
                entries.append((q_tile, c, start, max(min(chunk_tokens, kv_len - start), 0)))
        per_request.append(entries)
    new_bs = sum(len(e) for e in per_request)
    padded = max(m, total_tiles_q) if cuda_graph else new_bs
    flat = [(req, q_tile, c, start, tokens) for req, entries in enumerate(per_request)
            for q_tile, c, start, tokens in entries]
    items: list[WorkItem] = []
    for head in range(h_kv):
        base = padded * head
        items.extend(work_items([(req, head, c, start, tokens, None, q_tile, x + base, None)
                                 for x, (req, q_tile, c, start, tokens) in enumerate(flat)]))
    return Plan(
        backend=FA2,
        batch=batch,
        work_items=tuple(items),
        chunk_tokens=chunk_tokens,
        split_kv=split_kv,
        padded_batch_size=padded,
        grid=(padded, 1, h_kv),
        merge=split_kv,
        persistent=False,
        max_grid=max_grid,
        splits=tuple(splits),
        details={
            "occupancy": occ,
            "new_batch_size": new_bs,
            "chunk_pages": chunk_pages,
            "cta_tile_q": cta_tile_q,
            "total_num_rows": total_rows,
            "max_batch_size_if_split": m,
            "cuda_graph": cuda_graph,
        },
    )
