"""The schedule model's fast paths give exactly what the general algorithms give, on the real H200 sweep batches.

- FlashInfer SM90's work assignment (flashinfer_sm90._assign: whole runs of equal-cost jobs at once) vs the
  min-heap FlashInfer's scheduler.cuh uses, one job at a time (restated below as the reference);
- the simulator's bulk path for static persistent plans (static_bulk.run_static, numpy) and its one-slot-per-SM
  loop (single_loop.run_single) vs the general event loop (shared_loop.run_shared), bit for bit: end time, per-SM
  busy time, tail, and every segment in the same order.

Batches: the KV lengths of flashinfer_decode_sweep.meta.json.gz (QH 32, KH 4, HD 128, page 16; 5 distributions x
13 batch sizes 8..512, read with zcat | jq '.cases[] | [.dist, .B]'); the sizes below cover one, two and several
items per SM.
"""

from __future__ import annotations

import gzip
import heapq
import math
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import orjson
import pytest

from traceinsight.model import FA3, H200_COSTS, SM90, Batch, CostModel, Plan, gpu_by_key, plan
from traceinsight.model.simulator.layout import layout
from traceinsight.model.simulator.shared_loop import run_shared
from traceinsight.model.simulator.single_loop import run_single
from traceinsight.model.simulator.static_bulk import run_static

H200 = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "h200"
GPU = gpu_by_key("h200")
DISTS = ("uniform", "skew40", "skew60", "skew80", "two40")
SIZES = (8, 96, 297, 512)


@cache
def batches() -> dict[tuple[str, int], Batch]:
    m = orjson.loads(gzip.decompress((H200 / "flashinfer_decode_sweep.meta.json.gz").read_bytes()))
    return {(c["dist"], c["B"]): Batch(c["kv_lens"], m["PAGE"], m["QH"], m["KH"], m["HD"])
            for c in m["cases"] if c["tc"] == 1}


def heap_workers(batch: Batch, num_ctas: int) -> list[int]:
    """The CTA of every SM90 work item by FlashInfer's own loop: per query head, requests longest first, each query
    tile to the CTA of least accumulated cost (2 * cta_tile_q + kv_len per tile), a (cost, cta) min-heap."""
    tile_q = 128
    order = sorted(range(batch.batch_size), key=lambda i: -batch.kv_lens[i])
    heap = [(0, cta) for cta in range(num_ctas)]
    out = []
    for _ in range(batch.qo_heads):
        for req in order:
            for _ in range(math.ceil(batch.query_lens[req] / tile_q)):
                cost, cta = heap[0]
                heapq.heapreplace(heap, (cost + 2 * tile_q + batch.kv_lens[req], cta))
                out.append(cta)
    return out


@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("b", (8, 16, 297, 512))
def test_sm90_assignment_matches_the_heap(dist: str, b: int) -> None:
    p = plan(SM90, batches()[(dist, b)], GPU, 1)
    assert [it.worker for it in p.work_items] == heap_workers(p.batch, GPU.num_sms)


def test_sm90_assignment_with_multi_tile_requests() -> None:
    # Query lengths of 1..300 rows (1..3 tiles of 128) on the skew80 B=96 KV lengths.
    kv = batches()[("skew80", 96)]
    b = replace(kv, qo_lens=tuple(1 + (37 * i) % 300 for i in range(kv.batch_size)))
    p = plan(SM90, b, GPU, 1)
    assert [it.worker for it in p.work_items] == heap_workers(b, GPU.num_sms)
    assert len(p.work_items) == 32 * sum(math.ceil(q / 128) for q in b.query_lens)


def _inputs(p: Plan, occ: int, cost: CostModel) -> tuple[Any, list[float], list[float], list[float]]:
    lay = layout(p, GPU.num_sms, occ)
    work = [k + cost.item_overhead_tokens for k in lay.kv_tokens]
    n = max(1, -(-len(lay.sm_of_slot) // GPU.num_sms))
    rate = [cost.per_cta_rate(i) for i in range(n + 1)]
    return lay, work, rate, [i * rate[i] for i in range(n + 1)]


def _same(fast: Any, slow: Any) -> None:
    assert fast is not None
    assert fast.t == slow.t and fast.busy == slow.busy
    assert fast.tail_ns == slow.tail_ns and fast.tail_intervals == slow.tail_intervals
    assert [(s.sm, s.slot, s.start_ns, s.end_ns, id(s.item)) for s in fast.segments] == [
        (s.sm, s.slot, s.start_ns, s.end_ns, id(s.item)) for s in slow.segments]


COSTS = {"sm90": H200_COSTS[SM90], "no-cap": replace(H200_COSTS[SM90], gpu_rate=None, item_overhead_tokens=0.0),
         "tight-cap": replace(H200_COSTS[SM90], gpu_rate=4.0, sharpness=math.inf)}


@pytest.mark.parametrize("cost_name", COSTS)
@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("b", SIZES)
def test_static_bulk_path_equals_the_event_loop(cost_name: str, dist: str, b: int) -> None:
    p = plan(SM90, batches()[(dist, b)], GPU, 1)
    cost = COSTS[cost_name]
    lay, work, rate, demand = _inputs(p, 1, cost)
    fast = run_static(p.work_items, lay.worker_items, lay.worker_counts, work, rate, demand, cost.gpu_rate,
                      GPU.num_sms, True)
    slow = run_shared(p.work_items, lay.sm_of_slot, lay.static_queues(), [], work, rate, demand, cost.gpu_rate,
                      GPU.num_sms, True)
    _same(fast, slow)
    assert len(fast.segments) == len(p.work_items)


@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("b", SIZES)
def test_single_slot_loop_equals_the_event_loop(dist: str, b: int) -> None:
    p = plan(FA3, batches()[(dist, b)], GPU, 1)  # persistent, pulling from one global queue
    cost = H200_COSTS[FA3]
    lay, work, rate, demand = _inputs(p, 1, cost)
    fast = run_single(p.work_items, len(lay.sm_of_slot), lay.global_order[::-1], work, rate, demand,
                      cost.gpu_rate, GPU.num_sms, True)
    slow = run_shared(p.work_items, lay.sm_of_slot, [], lay.global_order[::-1], work, rate, demand,
                      cost.gpu_rate, GPU.num_sms, True)
    _same(fast, slow)
