"""FlashInfer's SM90 (Hopper) batch prefill planner used for tensor-core decode (`PrefillSM90Plan`).

Restated from FlashInfer's `scheduler.cuh` (0.6.x): a persistent grid of num_SM CTAs; requests sorted by KV
length, longest first; for every query head (the kernel does not pack GQA heads) and every query tile, the
work goes to the CTA with the least accumulated cost (a min-heap), cost = 2 * cta_tile_q + kv_len.
Never splits KV. When one head would need more than 4096 work items the same schedule serves all heads.
The heap's choices are computed a run of equal-cost jobs at a time (_assign_run), with the same result.
"""

from __future__ import annotations

from itertools import repeat

import numpy as np

from traceinsight.model.gpus import GPU
from traceinsight.model.occupancy import SM90
from traceinsight.model.planners.types import Batch, Plan, WorkItem, ceil_div, work_items

# Above this many work items per head, FlashInfer schedules head 0 only and reuses it for every head.
SAME_SCHEDULE_WORKS_PER_HEAD = 4096


def sm90_cta_tile_q(head_dim_vo: int) -> int:
    """Query rows per CTA tile of FlashInfer's SM90 prefill kernel."""
    return 192 if head_dim_vo == 64 else 128


def _assign_run(costs: np.ndarray, k: int, w: int) -> np.ndarray:
    """Hand `k` jobs of cost `w` (> 0) one by one to the CTA with the least cost (ties: lowest index), updating
    `costs` (int64, one per CTA) in place; the CTA of each job, in order. The same as k pops of a (cost, cta)
    min-heap, without the k steps: CTA i takes the jobs that find it at costs c_i, c_i + w, c_i + 2w..., so the
    jobs go out in the sorted order of the pairs (c_i + j * w, i). Writing c_i = q_i * w + r_i, each "block"
    [b * w, (b + 1) * w) holds one pair per CTA with q_i <= b, ordered by (r_i, i): the jobs sweep the active CTAs
    in that order, block after block, and more CTAs join when the blocks reach their q_i.
    """
    n = len(costs)
    cta = np.arange(n)
    q, r = np.divmod(costs, w)
    by_q = np.lexsort((cta, r, q))  # CTAs by (q_i, r_i, i)
    levels, first = np.unique(q[by_q], return_index=True)  # each q value and where its CTAs start in by_q
    active = np.append(first[1:], n)  # CTAs in play once a level has joined
    span = np.append(np.diff(levels), k)  # blocks until the next level joins (the last: enough for all jobs)
    done_before = np.concatenate(([0], np.cumsum(span * active)))  # jobs handed out before each level joins
    last = int(np.searchsorted(done_before, k, side="left")) - 1  # the level during which the jobs run out
    out = []
    for j in range(last + 1):
        ctas = by_q[:active[j]]
        ctas = ctas[np.lexsort((ctas, r[ctas]))]  # the CTAs in play, by (r_i, i)
        if j < last:
            out.append(np.tile(ctas, int(span[j])))
            continue
        full, part = divmod(k - int(done_before[j]), len(ctas))
        out.append(np.tile(ctas, full))
        out.append(ctas[:part])
        stop = int(levels[j]) + full  # block where the jobs ran out; ctas[:part] take one job in it
        costs[ctas] = stop * w + r[ctas]
        costs[ctas[:part]] += w
    return np.concatenate(out)


def _assign(num_ctas: int, runs: list[tuple[int, int]], passes: int) -> list[list[int]]:
    """FlashInfer's min-heap assignment of `passes` repetitions of the job sequence `runs` = [(count, cost)]
    to `num_ctas` CTAs, every CTA starting at cost 0: the CTA of every job, per pass. Long runs go through
    _assign_run, short ones pick the least-cost CTA job by job (argmin returns the lowest index among equals, as
    the heap's (cost, cta) order does)."""
    costs = np.zeros(num_ctas, dtype=np.int64)
    out: list[list[int]] = []
    for _ in range(passes):
        ctas: list[np.ndarray] = []
        for k, w in runs:
            if k * 8 >= num_ctas and w > 0:
                ctas.append(_assign_run(costs, k, w))
                continue
            picked = np.empty(k, dtype=np.int64)
            for j in range(k):
                i = int(np.argmin(costs))
                costs[i] += w
                picked[j] = i
            ctas.append(picked)
        out.append(np.concatenate(ctas).tolist() if ctas else [])
    return out


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
    # One pass = one query head: every request longest first, its query tiles last to first, each job costing
    # 2 * cta_tile_q + kv_len. Equal costs come in runs (requests of equal length are adjacent in `order`).
    jobs = [(req, q_tile) for req in order for q_tile in range(tiles[req] - 1, -1, -1)]
    runs: list[tuple[int, int]] = []
    for req in order:
        w = 2 * cta_tile_q + kv_lens[req]
        if runs and runs[-1][1] == w:
            runs[-1] = (runs[-1][0] + tiles[req], w)
        elif tiles[req]:
            runs.append((tiles[req], w))
    per_pass = _assign(num_ctas, runs, 1 if same_schedule else batch.qo_heads)
    job_req = [req for req, _ in jobs]
    job_tile = [q_tile for _, q_tile in jobs]
    job_kv = [kv_lens[req] for req in job_req]
    n = len(jobs)
    items: list[WorkItem] = []
    for h in range(batch.qo_heads):
        ctas = per_pass[0 if same_schedule else h]
        base = len(items)
        items.extend(work_items(zip(job_req, repeat(h // g, n), repeat(0, n), repeat(0, n), job_kv, repeat(h, n),
                                    job_tile, range(base, base + n), ctas, strict=False)))  # as map(): to the shortest
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
