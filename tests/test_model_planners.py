"""Planners against the planners' own output (plan_info) and against every traced launch's grid.

Ground truth, read directly here: the sweep metas (130 + 65 cases: kv_lens and FlashInfer's `_plan_info`), the
nsys meta (16 cases), the Kineto sweep traces (kernel events `cat == "kernel"` with `args.grid`, inside the
`gpu_user_annotation` range "decode tc=T [backend=fa2 ]dist=D bs=B step=S") and the Nsight Systems export
(CUPTI_ACTIVITY_KIND_KERNEL gridX/Y/Z inside NVTX ranges "tc=T dist=D bs=B"). Counts checked with zcat/jq and
sqlite3: 390 + 195 steps, every step one attention launch; a merge kernel in a step exactly when split_kv == 1.
"""

from __future__ import annotations

import gzip
import re
import sqlite3
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import orjson
import pytest

from traceinsight.model import (
    CUDA_CORE,
    FA2,
    FA3,
    SM90,
    Batch,
    FA3Options,
    Plan,
    gpu_by_key,
    plan,
)
from traceinsight.model.planners.fa3 import num_splits_heuristic

H200 = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "h200"
GPU = gpu_by_key("h200")
STEP = re.compile(r"tc=(\d)(?: backend=\w+)? dist=(\w+) bs=(\d+) step=(\d+)")


@cache
def meta(name: str) -> dict[str, Any]:
    return orjson.loads(gzip.decompress((H200 / name).read_bytes()))


@cache
def steps(trace: str) -> dict[tuple[int, str, int], list[list[dict[str, Any]]]]:
    """{(tc, dist, B): per step, the flashinfer kernels inside that step's GPU annotation range}."""
    events = orjson.loads(gzip.decompress((H200 / trace).read_bytes()))["traceEvents"]
    ranges = sorted((e for e in events if e.get("cat") == "gpu_user_annotation"), key=lambda e: e["ts"])
    kernels = sorted(
        (e for e in events if e.get("cat") == "kernel" and "flashinfer" in e["name"]), key=lambda e: e["ts"]
    )
    out: dict[tuple[int, str, int], list[list[dict[str, Any]]]] = defaultdict(list)
    for r in ranges:
        m = STEP.search(r["name"])
        assert m is not None, r["name"]
        inside = [k for k in kernels if r["ts"] <= k["ts"] and k["ts"] + k["dur"] <= r["ts"] + r["dur"]]
        out[(int(m[1]), m[2], int(m[3]))].append(inside)
    return out


def batch_of(m: dict[str, Any], case: dict[str, Any]) -> Batch:
    return Batch(case["kv_lens"], m["PAGE"], m["QH"], m["KH"], m["HD"])


def cases(name: str, tc: int) -> list[dict[str, Any]]:
    return [c for c in meta(name)["cases"] if c["tc"] == tc]


SWEEP = "flashinfer_decode_sweep.meta.json.gz"
FA2_SWEEP = "flashinfer_fa2_decode_sweep.meta.json.gz"


def test_sweep_sizes() -> None:
    assert len(meta(SWEEP)["cases"]) == 130 and len(meta(FA2_SWEEP)["cases"]) == 65
    assert {k: meta(SWEEP)[k] for k in ("QH", "KH", "HD", "PAGE")} == {"QH": 32, "KH": 4, "HD": 128, "PAGE": 16}
    for c in meta(SWEEP)["cases"]:
        assert abs(sum(c["kv_lens"]) - 262_144) <= 500 and len(c["kv_lens"]) == c["B"]


@pytest.mark.parametrize("case", cases(SWEEP, 0), ids=lambda c: f"{c['dist']}-{c['B']}")
def test_cuda_core_planner_reproduces_plan_info(case: dict[str, Any]) -> None:
    p = plan(CUDA_CORE, batch_of(meta(SWEEP), case), GPU, 9)
    info = case["plan_info"]
    assert p.padded_batch_size == info[0]
    assert int(p.split_kv) == info[-1]
    assert int(p.details["cuda_graph"]) == info[8] == 0
    # Offsets of request_indices (0) and kv_tile_indices (padded * 4 bytes, 16-aligned) follow padded.
    assert info[4] == -(-p.padded_batch_size * 4 // 16) * 16


@pytest.mark.parametrize("case", cases(SWEEP, 1), ids=lambda c: f"{c['dist']}-{c['B']}")
def test_sm90_planner_reproduces_plan_info(case: dict[str, Any]) -> None:
    p = plan(SM90, batch_of(meta(SWEEP), case), GPU, 1)
    info = case["plan_info"]
    assert not p.split_kv and len(info) == 9
    # qo_tile_indices (4 bytes per work item) start at 0, qo_indptr right after: work items = 32 heads * B.
    assert info[1] == 4 * len(p.work_items) == 4 * 32 * case["B"]
    # work_indptr holds num_SM + 1 ints (16-aligned): 132 persistent CTAs.
    assert info[7] - info[6] == -(-(p.grid[0] + 1) * 4 // 16) * 16 == 544


@pytest.mark.parametrize("case", meta(FA2_SWEEP)["cases"], ids=lambda c: f"{c['dist']}-{c['B']}")
def test_fa2_planner_reproduces_plan_info(case: dict[str, Any]) -> None:
    p = plan(FA2, batch_of(meta(FA2_SWEEP), case), GPU, 2)
    info = case["plan_info"]
    assert (p.padded_batch_size, int(p.split_kv)) == (info[0], info[-1])
    assert p.details["total_num_rows"] == info[1] == case["B"]
    assert p.details["cta_tile_q"] == info[3] == 16


def test_nsys_meta_cases() -> None:
    nsys = orjson.loads((H200 / "flashinfer_decode.nsys.meta.json").read_bytes())
    assert len(nsys) == 16
    sweep = {(c["tc"], c["dist"], c["B"]): c for c in meta(SWEEP)["cases"]}
    for c in nsys:
        same = sweep[(c["tc"], c["dist"], c["B"])]
        assert same["plan_info"] == c["plan_info"]
        assert max(same["kv_lens"]) == c["max_len"]
        if c["tc"] == 0:
            p = plan(CUDA_CORE, batch_of(meta(SWEEP), same), GPU, 9)
            assert (p.padded_batch_size, int(p.split_kv)) == (c["plan_info"][0], c["plan_info"][-1])


@pytest.mark.parametrize(
    ("trace", "meta_name", "tc", "backend", "occ"),
    [
        ("flashinfer_decode_sweep.pt.trace.json.gz", SWEEP, 0, CUDA_CORE, 9),
        ("flashinfer_decode_sweep.pt.trace.json.gz", SWEEP, 1, SM90, 1),
        ("flashinfer_fa2_decode_sweep.pt.trace.json.gz", FA2_SWEEP, 1, FA2, 2),
    ],
)
def test_grids_match_every_traced_launch(trace: str, meta_name: str, tc: int, backend: str, occ: int) -> None:
    by_step = steps(trace)
    launches = 0
    for c in cases(meta_name, tc):
        p = plan(backend, batch_of(meta(meta_name), c), GPU, occ)
        recorded = by_step[(tc, c["dist"], c["B"])]
        assert len(recorded) == 3
        for kernels in recorded:
            attention = [k for k in kernels if "Merge" not in k["name"]]
            merges = [k for k in kernels if "Merge" in k["name"]]
            assert len(attention) == 1
            assert tuple(attention[0]["args"]["grid"]) == p.grid, (c["dist"], c["B"])
            assert bool(merges) == p.merge
            launches += 1
    assert launches == 3 * len(cases(meta_name, tc)) == 195


def test_grids_match_the_nsys_export() -> None:
    con = sqlite3.connect(f"file:{H200 / 'flashinfer_decode.sqlite'}?mode=ro&immutable=1", uri=True)
    ranges = con.execute("SELECT start, end, text FROM NVTX_EVENTS WHERE text LIKE 'tc=%' ORDER BY start").fetchall()
    kernels = con.execute(
        "SELECT k.start, k.end, s.value, gridX, gridY, gridZ FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.shortName ORDER BY k.start"
    ).fetchall()
    con.close()
    sweep = {(c["tc"], c["dist"], c["B"]): c for c in meta(SWEEP)["cases"]}
    assert len(ranges) == 16
    for start, end, text in ranges:
        m = re.fullmatch(r"tc=(\d) dist=(\w+) bs=(\d+)", text)
        assert m is not None
        tc, dist, b = int(m[1]), m[2], int(m[3])
        backend, occ = (CUDA_CORE, 9) if tc == 0 else (SM90, 1)
        p = plan(backend, batch_of(meta(SWEEP), sweep[(tc, dist, b)]), GPU, occ)
        attention = [k for k in kernels if start <= k[0] and k[1] <= end and ("Decode" in k[2] or "Prefill" in k[2])]
        assert [tuple(k[3:]) for k in attention] == [p.grid]


def _check_items(p: Plan) -> None:
    """Every KV token of every (request, head) is covered exactly once, in chunks of at most chunk_tokens."""
    covered: dict[tuple[int, int | None, int | None], int] = defaultdict(int)
    for it in p.work_items:
        covered[(it.request, it.kv_head, it.qo_head)] += it.kv_tokens
        if p.chunk_tokens is not None:
            assert it.kv_tokens <= p.chunk_tokens
    for (req, _, _), tokens in covered.items():
        assert tokens == p.batch.kv_lens[req]
    if not p.persistent:
        ctas = [it.cta for it in p.work_items]
        assert len(set(ctas)) == len(ctas) and max(ctas) < p.num_ctas


@pytest.mark.parametrize("backend", [CUDA_CORE, FA2, SM90, FA3])
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_work_items_cover_the_batch(backend: str, cuda_graph: bool) -> None:
    for c in meta(SWEEP)["cases"][::13]:
        p = plan(backend, batch_of(meta(SWEEP), c), GPU, 9 if backend == CUDA_CORE else 2, cuda_graph)
        _check_items(p)
        assert len(p.splits) == c["B"]


def test_cuda_graph_padding() -> None:
    uniform256 = Batch([1024] * 256, 16, 32, 4, 128)
    # KERNELS.md (measured): FA2 under CUDA graph pads to grid (383, 1, 4) at B = 256.
    assert plan(FA2, uniform256, GPU, 2, cuda_graph=True).grid == (383, 1, 4)
    assert plan(FA2, uniform256, GPU, 2, cuda_graph=True).split_kv
    # CUDA-core under CUDA graph: split_kv stays on below the threshold, grid.x = max_grid // H_kv.
    g = plan(CUDA_CORE, uniform256, GPU, 9, cuda_graph=True)
    assert g.split_kv and g.grid == (297, 4, 1) and len(g.work_items) == 1024
    assert not plan(CUDA_CORE, Batch([682] * 384, 16, 32, 4, 128), GPU, 9, cuda_graph=True).split_kv


def test_starved_split_just_below_the_threshold() -> None:
    # skew80 at B = 296 (sweep meta): one spare work item per head, the long request is cut in two only.
    c = next(c for c in cases(SWEEP, 0) if (c["dist"], c["B"]) == ("skew80", 296))
    p = plan(CUDA_CORE, batch_of(meta(SWEEP), c), GPU, 9)
    assert p.split_kv and p.splits[0] == 2 and sum(p.splits) == 297
    long_items = [it for it in p.work_items if it.request == 0]
    assert len(long_items) == 8 and max(it.kv_tokens for it in long_items) == 104_864


def test_sm90_balances_longest_first() -> None:
    c = next(c for c in cases(SWEEP, 1) if (c["dist"], c["B"]) == ("skew80", 8))
    p = plan(SM90, batch_of(meta(SWEEP), c), GPU, 1)
    # Replay the assignment order: every item went to a CTA with the least accumulated cost
    # (2 * cta_tile_q + kv_len), requests longest first within each query head.
    load = [0] * 132
    for it in sorted(p.work_items, key=lambda it: it.cta):
        assert it.worker is not None and load[it.worker] == min(load)
        load[it.worker] += 2 * 128 + it.kv_tokens
    heads = [it.qo_head for it in p.work_items]
    assert heads == sorted(heads) and p.work_items[0].request == 0  # head-major, the long request first
    # The 32 query-head items of the 209,715-token request land on 32 different CTAs.
    assert len({it.worker for it in p.work_items if it.request == 0}) == 32
    assert max(load) >= 2 * 128 + 209_715 and min(load) > 0


def test_fa3_static_and_dynamic_split() -> None:
    # num_splits_heuristic, by hand: 4 m-blocks on 132 SMs; efficiency(s) = 4s/132 / ceil(4s/132).
    assert num_splits_heuristic(4, 132, 1639, 1, 0, False, 128) == 29  # first s with 4s/132 >= 0.85
    assert num_splits_heuristic(4, 132, 1639, 1, 0, False, 128, variant="fork") == 32  # >= 0.95 * 1.0
    assert num_splits_heuristic(4, 132, 4, 1, 0, False, 128) == 1  # n_blocks <= 4
    assert num_splits_heuristic(106, 132, 1639, 1, 0, False, 128) == 1  # >= 0.8 * num_SM m-blocks
    c = next(c for c in cases(SWEEP, 0) if (c["dist"], c["B"]) == ("skew80", 256))
    p = plan(FA3, batch_of(meta(SWEEP), c), GPU, 1)
    # blocks_per_sm = ceil(1.1 * 4 * (1639 + 255 * 2) / 132) = 72; the long request: ceil(1639 / 72) = 23.
    assert p.details["num_splits_static"] == 29 and p.details["blocks_per_sm"] == 72
    assert p.splits[0] == 23 and set(p.splits[1:]) == {1}
    assert p.merge and p.persistent and p.grid == (132, 1, 1)
    assert [it.request for it in p.work_items[:4]] == [0, 0, 0, 0]  # longest request first
    _check_items(p)
    big = Batch([64] * 993 + [100_000], 16, 32, 4, 128)
    assert set(plan(FA3, big, GPU, 1).splits) == {1}  # above 992 requests: no dynamic split
    fork = plan(FA3, batch_of(meta(SWEEP), c), GPU, 1, block_m=64, variant="fork", sm_margin=4)
    assert fork.grid == (128, 1, 1) and fork.details["block_m"] == 64
    assert FA3Options().block_n == 128


def test_plan_rejects_unknown_backends_and_options() -> None:
    b = Batch([100, 200], 16, 32, 4, 128)
    with pytest.raises(ValueError):
        plan("triton", b, GPU, 1)
    with pytest.raises(ValueError):
        plan(CUDA_CORE, b, GPU, 9, block_m=64)
    with pytest.raises(ValueError):
        Batch([100], 16, 30, 4, 128)  # 30 query heads over 4 KV heads
