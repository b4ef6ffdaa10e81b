"""FlashInfer CUDA-core batch decode planner (`DecodePlan` + `BatchDecodeWithPagedKVCacheWorkEstimationDispatched`).

Restated from FlashInfer's `include/flashinfer/attention/scheduler.cuh` (0.6.x):
max_grid = occ * num_SM; if B * H_kv >= max_grid no split, else the smallest chunk c (pages) with
H_kv * sum_b ceil(pages_b / c) <= max_grid by binary search over [max(128 // P, 1), max_b pages_b];
split_kv = not (new_bs == B and not cuda_graph); grid (padded_batch_size, H_kv); CTA (x, y) does work item x
of KV head y, so the linear CTA order is head-major: x + padded * y.
"""

from __future__ import annotations

import numpy as np

from traceinsight.model.gpus import GPU
from traceinsight.model.occupancy import CUDA_CORE
from traceinsight.model.planners.types import Batch, Plan, WorkItem, ceil_div, chunk_items, work_items


def binary_search_chunk_pages(max_grid: int, gdy: int, pages: tuple[int, ...], min_pages: int) -> tuple[int, int]:
    """FlashInfer's PartitionPagedKVCacheBinarySearchMinNumPagePerBatch: (chunk_pages, new_batch_size).

    The search loop counts ceil(pages / mid) without the max(pages, 1) the final count uses, as upstream does.
    """
    low, high = min_pages, max(pages)
    arr = np.array(pages, dtype=np.int64)  # exact integer counts, one numpy pass per candidate
    while low < high:
        mid = (low + high) // 2
        if int((-(-arr // mid)).sum()) * gdy > max_grid:  # ceil_div
            low = mid + 1
        else:
            high = mid
    return low, sum(ceil_div(max(p, 1), low) for p in pages)


def plan_cuda_core(batch: Batch, gpu: GPU, occ: int, cuda_graph: bool = False) -> Plan:
    """Plan FlashInfer's CUDA-core decode (`BatchDecodeWithPagedKVCacheKernel`) for `batch`.

    occ: resident CTAs per SM of the decode kernel (see occupancy.occupancy); cuda_graph: the wrapper was
    planned for CUDA-graph capture (pads grid.x to max_grid // H_kv whenever it splits).
    """
    b = batch.batch_size
    gdy = batch.kv_heads
    page = batch.page_size
    pages = batch.pages
    max_grid = occ * gpu.num_sms
    if b * gdy >= max_grid:
        split_kv = False
        chunk_pages = max(1, max(pages))
        new_bs = b
    else:
        chunk_pages, new_bs = binary_search_chunk_pages(max_grid, gdy, pages, max(128 // page, 1))
        split_kv = not (new_bs == b and not cuda_graph)
    if cuda_graph:
        padded = max_grid // gdy if split_kv else b
    else:
        padded = new_bs
    chunk_tokens = chunk_pages * page
    items: list[WorkItem] = []
    splits: list[int] = []
    for head in range(gdy):
        base = padded * head
        if not split_kv:  # one item per request: CTA x = request
            items.extend(work_items([(req, head, 0, 0, n, None, 0, req + base, None)
                                     for req, n in enumerate(batch.kv_lens)]))
            splits = [1] * b
            continue
        x = 0
        for req, kv_len in enumerate(batch.kv_lens):
            req_items = chunk_items(kv_len, chunk_tokens, req, head, first_cta=x + base)
            items.extend(req_items)
            x += len(req_items)
            if head == 0:
                splits.append(len(req_items))
    return Plan(
        backend=CUDA_CORE,
        batch=batch,
        work_items=tuple(items),
        chunk_tokens=chunk_tokens if split_kv else None,
        split_kv=split_kv,
        padded_batch_size=padded,
        grid=(padded, gdy, 1),
        merge=split_kv,
        persistent=False,
        max_grid=max_grid,
        splits=tuple(splits),
        details={
            "occupancy": occ,
            "new_batch_size": new_bs,
            "chunk_pages": chunk_pages,
            "cuda_graph": cuda_graph,
        },
    )
