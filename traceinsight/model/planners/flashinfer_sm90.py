"""FlashInfer's SM90 (Hopper) batch prefill planner used for tensor-core decode (`PrefillSM90Plan`).

Restated from FlashInfer's `scheduler.cuh` (0.6.x): a persistent grid of num_SM CTAs; requests sorted by KV
length, longest first; for every query head (the kernel does not pack GQA heads) and every query tile, the
work goes to the CTA with the least accumulated cost (a min-heap), cost = 2 * cta_tile_q + kv_len.
Never splits KV. When one head would need more than 4096 work items the same schedule serves all heads.
"""

from __future__ import annotations

import heapq

from traceinsight.model.gpus import GPU
from traceinsight.model.occupancy import SM90
from traceinsight.model.planners.types import Batch, Plan, WorkItem, ceil_div

# Above this many work items per head, FlashInfer schedules head 0 only and reuses it for every head.
SAME_SCHEDULE_WORKS_PER_HEAD = 4096


def sm90_cta_tile_q(head_dim_vo: int) -> int:
    """Query rows per CTA tile of FlashInfer's SM90 prefill kernel."""
    return 192 if head_dim_vo == 64 else 128


def plan_sm90(batch: Batch, gpu: GPU, occ: int, cuda_graph: bool = False) -> Plan:
    """Plan FlashInfer's SM90 tensor-core decode (`PrefillWithKVCacheKernel<...SparseCollectiveMainloop...>`).

    occ is recorded only (the kernel runs one CTA per SM). cuda_graph changes buffer sizes, not the schedule.
    Work items carry `worker` = the persistent CTA that runs them, in that CTA's order.
    """
    b = batch.batch_size
    g = batch.group_size
    cta_tile_q = sm90_cta_tile_q(batch.head_dim)
    num_ctas = gpu.num_sms
    q_lens = batch.query_lens
    kv_lens = batch.kv_lens
    total_rows = sum(q_lens)
    works_per_head = ceil_div(total_rows, cta_tile_q) + b - 1
    same_schedule = works_per_head > SAME_SCHEDULE_WORKS_PER_HEAD
    order = sorted(range(b), key=lambda i: -kv_lens[i])  # stable: ties keep request order
    tiles = [ceil_div(q, cta_tile_q) for q in q_lens]
    heap = [(0.0, cta) for cta in range(num_ctas)]
    schedule: list[tuple[int, int, int, int]] = []  # (qo_head, request, q_tile, worker)
    for qo_head in range(1 if same_schedule else batch.qo_heads):
        for req in order:
            for q_tile in range(tiles[req] - 1, -1, -1):
                cost, cta = heap[0]
                heapq.heapreplace(heap, (cost + 2 * cta_tile_q + kv_lens[req], cta))
                schedule.append((qo_head, req, q_tile, cta))
    heads = range(batch.qo_heads) if same_schedule else (None,)
    items: list[WorkItem] = []
    for head in heads:
        for qo_head, req, q_tile, cta in schedule:
            h = qo_head if head is None else head
            items.append(
                WorkItem(
                    request=req,
                    kv_head=h // g,
                    chunk_index=0,
                    kv_start=0,
                    kv_tokens=kv_lens[req],
                    qo_head=h,
                    qo_tile=q_tile,
                    cta=len(items),
                    worker=cta,
                )
            )
    return Plan(
        backend=SM90,
        batch=batch,
        work_items=tuple(items),
        chunk_tokens=None,
        split_kv=False,
        padded_batch_size=None,
        grid=(num_ctas, 1, 1),
        merge=False,
        persistent=True,
        max_grid=num_ctas,
        splits=(1,) * b,
        details={
            "occupancy": occ,
            "cta_tile_q": cta_tile_q,
            "total_num_works": len(items),
            "same_schedule_for_all_heads": same_schedule,
            "cuda_graph": cuda_graph,
        },
    )
