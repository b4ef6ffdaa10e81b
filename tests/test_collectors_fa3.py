"""The FlashAttention-3 collector (`--backend fa3`, collectors/fa3_decode.py): its options through the CLI (one-line
errors, exit 2), its step keys, the decoding of FA3's scheduler metadata and the sidecar's `call` / `plan` built
from it (traceinsight.sidecar/1.2); and the H200 captures in examples/fa3/ (every sidecar validates and loads, each
step range holds the FA3 kernels its call implies, the combine kernel runs iff the static split count is above 1,
above FA3's 992-request cap no request is cut, the per-request splits follow FA3's prepare kernel recomputed from
the KV lengths, the cliff at 993 requests in the timing runs).

The trace checks were first made with standalone scripts over the files (Kineto: user_annotation ranges ->
cuda_runtime / cuda_driver launches -> kernels by correlation id; sqlite3 on the nsys export; python csv on the
ncu exports); the numbers asserted below were read that way.
"""

from __future__ import annotations

import bisect
import importlib.util
import json
import math
import re
import sqlite3
import struct
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import ncu_num, ncu_rows, read_json, sidecar_in

from collectors import sidecar as writer
from collectors.cli import build_config, collect
from collectors.config import (
    FA3_PATH,
    NCU_KERNEL_REGEX_FA3,
    Fa3Config,
    Fa3Variant,
    ModelShape,
    RunConfig,
    fa3_serving_key,
    fa3_sweep_key,
    range_name,
)
from collectors.distributions import kv_lens
from collectors.fa3_decode import (
    PLAN_INFO_MAX_INTS,
    call_record,
    cu_seqlens,
    decode_metadata,
    plan_record,
    static_splits_estimate,
)
from collectors.sidecar import PlanRecord, StepRecord
from traceinsight.ingest import load
from traceinsight.ingest import sidecar as reader
from traceinsight.model import FA3 as FA3_BACKEND
from traceinsight.model import Batch, gpu_by_key, plan

REPO = Path(__file__).resolve().parents[1]
FA3 = REPO / "examples" / "fa3"
CAP = 992  # PREPARE_VARLEN_MAX_BATCHES_1CTA
BLOCK_N = 176  # kBlockN of FA3's D = 128 bf16 non-causal SM90 tile (the kernel names say cute::C<176>)
NUM_SMS = 132


_json = read_json


def _sidecar(stem: str) -> dict[str, Any]:
    return sidecar_in(FA3, stem)


def _config(args: list[str]) -> RunConfig:
    ctx = collect.make_context("collect", list(args))
    params = dict(ctx.params)
    return build_config(params.pop("kind"), params.pop("out"), **params)


# ---------------------------------------------------------------------------------------------- the CLI
@pytest.mark.parametrize(("args", "message"), [
    (["sweep", "--backend", "fa3", "--paths", "cuda-core"],
     "--paths cuda-core needs FlashInfer (--backend flashinfer); --backend fa3 runs the one path fa3-varlen"),
    (["sweep", "--backend", "fa3", "--paths", "fa3-varlen,tc-fa2"], "--paths tc-fa2 needs FlashInfer"),
    (["sweep", "--backend", "fa3", "--kv-dtype", "fp16"], "--backend fa3 runs bf16 only"),
    (["sweep", "--backend", "fa3", "--q-dtype", "fp16"], "got --q-dtype fp16"),
    (["sweep", "--backend", "fa3", "--kv-dtype", "fp8_e4m3"], "got --kv-dtype fp8_e4m3"),
    (["timing", "--backend", "fa3", "--page-size", "16"], "--backend fa3 has no paged KV"),
    (["loop", "--backend", "fa3"], "--backend fa3 runs sweep, serving, timing, not loop"),
    (["serving", "--backend", "fa3", "--cuda-graph"], "--backend fa3 runs eager only"),
    (["sweep", "--backend", "fa3", "--head-dim", "512"], "--head-dim up to 256"),
    (["sweep", "--num-splits", "4"], "--num-splits needs --backend fa3"),
    (["sweep", "--sm-margin", "8"], "--sm-margin needs --backend fa3"),
    (["sweep", "--scheduler-metadata", "on"], "--scheduler-metadata needs --backend fa3"),
    (["sweep", "--causal", "both"], "--causal needs --backend fa3"),
    (["sweep", "--pack-gqa", "on"], "--pack-gqa needs --backend fa3"),
    (["sweep", "--backend", "fa3", "--num-splits", "0,x"], "--num-splits: 'x' is not an integer"),
    (["sweep", "--backend", "fa3", "--num-splits", "-1"], "--num-splits: -1 is below 0"),
    (["sweep", "--backend", "fa3", "--num-splits", "300"], "--num-splits: 300 is above FA3's 256 splits"),
    (["sweep", "--backend", "fa3", "--sm-margin", "-8"], "--sm-margin: -8 is below 0"),
    (["sweep", "--backend", "fa3", "--causal", "maybe"], "Invalid value for '--causal'"),
    (["sweep", "--backend", "fa2"], "Invalid value for '--backend'"),
    (["timing", "--backend", "fa3", "--profiler", "ncu"], "timing runs without a profiler"),
])
def test_cli_fa3_errors_are_one_line_exit_2(args: list[str], message: str) -> None:
    res = CliRunner().invoke(collect, [*args, "--out", "o"])
    assert res.exit_code == 2, res.output
    lines = res.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceinsight: error: collect: "), res.output
    assert message in lines[0]


def test_cli_fa3_config() -> None:
    cfg = _config(["sweep", "--out", "o", "--backend", "fa3", "--qo-heads", "64", "--kv-heads", "8",
                   "--num-splits", "0,1,16", "--scheduler-metadata", "both", "--sm-margin", "0,8"])
    assert (cfg.name, cfg.backend, cfg.paths) == ("sweep_q64kv8d128_fa3_torch", "fa3", (FA3_PATH,))
    assert (cfg.ncu_kernels, cfg.ncu_name_base) == (NCU_KERNEL_REGEX_FA3, "demangled")
    assert cfg.model == {"qo_heads": 64, "kv_heads": 8, "head_dim": 128, "kv_dtype": "bfloat16",
                         "q_dtype": "bfloat16"}  # no page_size: FA3's varlen KV has no pages
    variants = cfg.fa3.variants()
    assert len(variants) == 3 * 2 * 1 * 2
    assert variants[0] == Fa3Variant() and variants[-1] == Fa3Variant(16, True, False, 8)
    assert RunConfig.from_json(cfg.to_json()) == cfg
    timing = _config(["timing", "--out", "o", "--backend", "fa3", "--paths", FA3_PATH])
    assert (timing.name, timing.profiler, timing.fa3) == ("timing_q32kv4d128_fa3_none", "none", Fa3Config())
    serving = _config(["serving", "--out", "o", "--backend", "fa3", "--profiler", "ncu", "--causal", "on",
                       "--pack-gqa", "off"])
    assert serving.name == "serving_q32kv4d128_fa3_ncu"
    assert serving.fa3.variants() == [Fa3Variant(0, False, True, 0, False)]
    # FlashInfer runs keep their defaults (page size 16, FlashInfer's kernel regex matched on function names)
    flashinfer = _config(["sweep", "--out", "o"])
    assert (flashinfer.backend, flashinfer.shape.page_size, flashinfer.ncu_name_base) == ("flashinfer", 16, "function")
    assert "page_size" in flashinfer.model


def test_fa3_keys_match_their_range_names() -> None:
    var = Fa3Variant(16, True, False, 8)
    key = fa3_sweep_key(var, "skew80", 993, 1)
    assert key == "path=fa3-varlen splits=16 meta=1 causal=0 margin=8 dist=skew80 bs=993 step=1"
    assert reader.key_matches(key, range_name(key))
    assert not reader.key_matches(fa3_sweep_key(Fa3Variant(1), "skew80", 993, 1), range_name(key))
    assert fa3_sweep_key(var, "uniform", 64) == "path=fa3-varlen splits=16 meta=1 causal=0 margin=8 dist=uniform bs=64"
    assert fa3_serving_key(Fa3Variant(), 17, 990) == "path=fa3-varlen splits=0 meta=0 causal=0 margin=0 step=17 bs=990"
    assert Fa3Variant(pack_gqa=True).tokens.endswith(" pack=1")


# ---------------------------------------------------------------------------------------------- the metadata
# get_scheduler_metadata() of the H200 smoke test (python -m collectors.fa3_decode, shape A, num_splits 0):
# KV lengths [5000, 7, 300, 1] -> B_r 4, three vectors and the semaphore, verbatim.
SMOKE_B4_LENS = [5000, 7, 300, 1]
SMOKE_B4_INTS = [15, 1, 1, 1, 1, 1, 1, 1, 0, 2, 1, 3, 0]
# KV lengths [40000] + [100] * 6 (B_r 8): slot 7 of each vector is padding FA3 never writes (torch::empty: the
# smoke test printed 1093735360 there, and 1084399534 in the order vector's padding); the m_blocks padding value
# was not printed, any value does.
SMOKE_B7_INTS = [29, 1, 1, 1, 1, 1, 1, 1093735360, 1, 1, 1, 1, 1, 1, 1, 77, 0, 1, 2, 3, 4, 5, 6, 1084399534, 0]


def test_decode_metadata_of_the_smoke_test() -> None:
    md = decode_metadata(SMOKE_B4_INTS, 4)
    assert (md.vectors, md.semaphore) == (3, 0)
    assert md.splits_by_virtual == [15, 1, 1, 1] and md.m_blocks_by_virtual == [1, 1, 1, 1]
    assert md.order == [0, 2, 1, 3]  # requests sorted by KV blocks, longest first: 5000, 300, 7, 1 tokens
    assert md.splits == [15, 1, 1, 1] and md.nheads_in_l2 is None
    md7 = decode_metadata(SMOKE_B7_INTS, 7)
    assert md7.splits == [29] + [1] * 6 and md7.order == list(range(7)) and md7.semaphore == 0
    # causal / local attention adds a heads-in-L2 vector; a permuted order maps splits back to requests
    four = [1, 3, 2, 0] + [1] * 4 + [3, 1, 2, 0] + [8, 8, 8, 8] + [0]
    md4 = decode_metadata(four, 4)
    assert md4.vectors == 4 and md4.nheads_in_l2 == [8, 8, 8, 8] and md4.splits == [0, 3, 2, 1]


@pytest.mark.parametrize(("ints", "batch", "message"), [
    (SMOKE_B4_INTS[:-2], 4, "does not fit a batch of 4"),
    (SMOKE_B4_INTS, 5, "does not fit a batch of 5"),
    ([1] * 4 + [1] * 4 + [0, 0, 1, 3] + [0], 4, "not a permutation"),
    ([], 1, "does not fit"),
])
def test_decode_metadata_errors(ints: list[int], batch: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_metadata(ints, batch)


def test_plan_and_call_records() -> None:
    plan = plan_record(SMOKE_B4_INTS, 4, 25)
    assert plan.to_json() == {"padded_batch_size": None, "split_kv": True, "chunk_tokens": None,
                              "plan_info": SMOKE_B4_INTS, "num_splits_static": 25, "splits": [15, 1, 1, 1]}
    above_cap = [1] * 996 + [1] * 996 + list(range(993)) + [0] * 3 + [0]
    plan = plan_record(above_cap, 993, 29)  # static 29, combine runs, yet no request cut
    assert (plan.split_kv, plan.extra["num_splits_static"], set(plan.extra["splits"])) == (False, 29, {1})
    big = [1] * 1668 * 2 + list(range(1668)) + [0]  # past PLAN_INFO_MAX_INTS the raw ints are left out
    assert len(big) >= PLAN_INFO_MAX_INTS
    assert "plan_info" not in plan_record(big, 1668, 1).to_json()
    assert call_record(Fa3Variant(4, True, True, 8), 209715) == {
        "num_splits": 4, "pack_gqa": None, "sm_margin": 8, "causal": True, "scheduler_metadata": True,
        "max_seqlen_k": 209715}
    assert cu_seqlens([3, 1, 4]) == [0, 3, 4, 8]


def test_sidecar_with_a_call_is_version_1_2_and_validates(tmp_path: Path) -> None:
    step = StepRecord("path=fa3-varlen splits=0 meta=0 causal=0 margin=0 bs=4 step=0", SMOKE_B4_LENS,
                      FA3_PATH, "fa3", False, plan_record(SMOKE_B4_INTS, 4, 25),
                      {"call": call_record(Fa3Variant(), 5000)})
    doc = writer.document({"name": "NVIDIA H200", "num_sms": 132}, {"fa3_fwd": "0.0.3"},
                          ModelShape().to_sidecar(paged=False), [step])
    assert doc["schema"] == "traceinsight.sidecar/1.2"
    path = writer.write(tmp_path / "x.sidecar.json", doc)
    back = json.loads(path.read_text())
    # the example step of docs/COLLECTORS.md, field for field
    assert back["steps"][0] == {
        "key": "path=fa3-varlen splits=0 meta=0 causal=0 margin=0 bs=4 step=0", "batch_size": 4,
        "kv_lens": [5000, 7, 300, 1], "path": "fa3-varlen", "backend": "fa3", "cuda_graph": False,
        "plan": {"padded_batch_size": None, "split_kv": True, "chunk_tokens": None,
                 "plan_info": [15, 1, 1, 1, 1, 1, 1, 1, 0, 2, 1, 3, 0], "num_splits_static": 25,
                 "splits": [15, 1, 1, 1]},
        "call": {"num_splits": 0, "pack_gqa": None, "sm_margin": 0, "causal": False, "scheduler_metadata": False,
                 "max_seqlen_k": 5000}}
    reader.validate(back, path)
    # FlashInfer steps keep /1 (no call) and their plan layout
    flash = StepRecord("path=cuda-core dist=uniform bs=1 step=0", [8], "cuda-core", "flashinfer-cuda-core", False,
                       PlanRecord(1, False, None, [1] * 10))
    assert writer.document({}, {}, ModelShape().to_sidecar(), [flash])["schema"] == "traceinsight.sidecar/1"
    assert list(flash.plan.to_json()) == ["padded_batch_size", "split_kv", "chunk_tokens", "plan_info"]


# ---------------------------------------------------------------------------------------------- FA3's planner
def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def fa3_splits(kv_lens: list[int], kv_heads: int, static: int, num_sms: int = NUM_SMS) -> list[int]:
    """Per-request splits as FA3's prepare kernel sets them (flash_prepare_scheduler.cu, one query row per request,
    pack-GQA: one m-block per request and KV head), recomputed from the KV lengths alone."""
    if len(kv_lens) > CAP or static == 1:
        return [1] * len(kv_lens)
    blocks = [math.ceil(n / BLOCK_N) for n in kv_lens]
    per_sm = math.ceil(_f32(_f32(_f32(_f32(float(sum(blocks))) * _f32(1.1)) * kv_heads) / num_sms))
    return [max(min(math.ceil(b / per_sm), static), 1) for b in blocks]


def _fa3_sidecars() -> list[Path]:
    return sorted(FA3.glob("*.sidecar.json*"))


@pytest.mark.parametrize("path", _fa3_sidecars(), ids=lambda p: p.name)
def test_committed_plans_follow_fa3s_prepare_kernel(path: Path) -> None:
    doc = _json(path)
    kv_heads = doc["model"]["kv_heads"]
    for s in doc["steps"]:
        call, plan, b = s["call"], s["plan"], s["batch_size"]
        static = plan["num_splits_static"]
        if call["num_splits"] > 0:
            assert static == call["num_splits"], s["key"]
        else:  # the heuristic, as if B were 1 (varlen), on the SMs left by sm_margin
            assert static == static_splits_estimate(kv_heads, call["max_seqlen_k"], NUM_SMS - call["sm_margin"])
        assert call["max_seqlen_k"] == max(s["kv_lens"])
        assert plan["splits"] == fa3_splits(s["kv_lens"], kv_heads, static, NUM_SMS - call["sm_margin"]), s["key"]
        assert plan["split_kv"] == any(x > 1 for x in plan["splits"])
        if b > CAP:  # above the cap no request is cut, whatever the static split count
            assert set(plan["splits"]) == {1} and not plan["split_kv"], s["key"]
        if "plan_info" in plan:
            md = decode_metadata(plan["plan_info"], b)
            assert md.splits == plan["splits"] and md.semaphore == 0
            # the virtual batch: each prepare CTA (992 requests) sorts its requests by KV blocks per split, most first
            work = [math.ceil(math.ceil(s["kv_lens"][r] / BLOCK_N) / plan["splits"][r]) for r in md.order or []]
            for lo in range(0, len(work), CAP):
                assert work[lo:lo + CAP] == sorted(work[lo:lo + CAP], reverse=True), s["key"]
                assert {r // CAP for r in (md.order or [])[lo:lo + CAP]} == {lo // CAP}
        else:
            assert len(plan["splits"]) * 3 + 1 >= PLAN_INFO_MAX_INTS


# ---------------------------------------------------------------------------------------------- the captures
def test_committed_files_and_their_sizes() -> None:
    names = sorted(p.name for p in FA3.iterdir())
    stems = {n.split(".")[0] for n in names if n != "README.md"}
    assert stems == {
        "sweep_q32kv4d128_fa3_torch", "sweep_q64kv8d128_fa3_torch", "variants_q32kv4d128_fa3_torch",
        "variants_q64kv8d128_fa3_torch", "serving_q64kv8d128_fa3_torch", "sweep_q32kv4d128_fa3_nsys",
        "sweep_q32kv4d128_fa3_ncu", "sweep_q64kv8d128_fa3_ncu", "ncu_variants_q32kv4d128_fa3_ncu",
        "timing_q32kv4d128_fa3_none", "timing_q64kv8d128_fa3_none", "timing_variants_q32kv4d128_fa3_none"}
    assert sum(p.stat().st_size for p in FA3.iterdir()) < 12 * 1024 * 1024


@pytest.mark.parametrize("path", _fa3_sidecars(), ids=lambda p: p.name)
def test_committed_sidecars_validate_and_load(path: Path) -> None:
    doc = _json(path)
    reader.validate(doc, path)
    assert doc["schema"] == "traceinsight.sidecar/1.2"
    assert doc["gpu"] == {**doc["gpu"], "name": "NVIDIA H200", "num_sms": 132}
    assert doc["software"] == {"torch": "2.11.0+cu130", "cuda": "13.0", "fa3_fwd": "0.0.3", "nvtx": "0.2.16"}
    assert "page_size" not in doc["model"] and doc["model"]["kv_dtype"] == "bfloat16"
    for s in doc["steps"]:
        assert (s["path"], s["backend"], s["cuda_graph"]) == (FA3_PATH, "fa3", False)
        assert s["batch_size"] == len(s["kv_lens"]) == len(s["plan"]["splits"])
        assert set(s["call"]) == {"num_splits", "pack_gqa", "sm_margin", "causal", "scheduler_metadata",
                                  "max_seqlen_k"}
        assert s["plan"]["padded_batch_size"] is None
        if not path.name.startswith("serving"):
            assert sum(s["kv_lens"]) == 262144
    db, (tid,) = load([path])
    assert db.rows("SELECT count(*) AS n FROM batches WHERE trace_id = $t", {"t": tid})[0]["n"] == len(doc["steps"])


def _kind(name: str) -> str:
    if "prepare_varlen_num_blocks" in name:
        return "prepare"
    if "FlashAttnFwdSm90" in name:
        return "main"
    if "FlashAttnFwdCombine" in name:
        return "combine"
    return "other"


def _kineto_steps(path: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    """(range name, kernels launched inside it) for every 'decode ...' record_function range. FA3 launches its main
    kernel with cudaLaunchKernelExC (a runtime call) and, for clusters, cuLaunchKernelEx (a driver call)."""
    events = _json(path)["traceEvents"]
    kernels: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "kernel":
            kernels[e["args"]["correlation"]].append(e)
    launches = sorted((e["ts"], e["tid"], e["args"].get("correlation")) for e in events
                      if e.get("cat") in ("cuda_runtime", "cuda_driver"))
    stamps = [t for t, _, _ in launches]
    out = []
    for r in (e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("decode ")):
        lo, hi = bisect.bisect_left(stamps, r["ts"]), bisect.bisect_right(stamps, r["ts"] + r["dur"])
        out.append((r["name"], [k for _, tid, c in launches[lo:hi] if tid == r["tid"] for k in kernels.get(c, [])]))
    return out


def _expect(step: dict[str, Any], kinds: list[str], grids: list[tuple[int, int, int]], name: str) -> None:
    """The kernels of one step as its call implies: FA3's prepare kernel unless the metadata was precomputed (its
    grid: one CTA per 992 requests), the persistent main kernel on num_SMs - sm_margin CTAs, the combine kernel iff
    the static split count is above 1 (grid z = B); with precomputed metadata and one split, a fill kernel zeroes
    the semaphore."""
    call, plan, b = step["call"], step["plan"], step["batch_size"]
    want = (["prepare"] if not call["scheduler_metadata"] else []) + ["main"]
    if plan["num_splits_static"] > 1:
        want.append("combine")
    elif call["scheduler_metadata"]:
        want.append("other")
    assert kinds == want, name
    by_kind = dict(zip(kinds, grids, strict=True))
    assert by_kind["main"] == (NUM_SMS - call["sm_margin"], 1, 1), name
    if "prepare" in by_kind:
        assert by_kind["prepare"] == (math.ceil(b / CAP), 1, 1), name
    if "combine" in by_kind:
        assert by_kind["combine"][2] == b, name


KINETO = {  # stem -> (ranges, ranges with a combine kernel), counted with the standalone script
    "sweep_q32kv4d128_fa3_torch": (60, 44),  # uniform from B = 512: static 1, no combine
    "sweep_q64kv8d128_fa3_torch": (60, 44),
    "variants_q32kv4d128_fa3_torch": (128, 96),
    "variants_q64kv8d128_fa3_torch": (128, 96),
    "serving_q64kv8d128_fa3_torch": (400, 400),
}


@pytest.mark.parametrize("stem", sorted(KINETO))
def test_kineto_steps_hold_the_fa3_kernels_their_call_implies(stem: str) -> None:
    steps = {s["key"]: s for s in _sidecar(stem)["steps"]}
    ranges = _kineto_steps(FA3 / f"{stem}.pt.trace.json.gz")
    assert len(ranges) == len(steps) == KINETO[stem][0]
    combine = 0
    for name, kernels in ranges:
        step = steps[name.removeprefix("decode ")]
        kinds = [_kind(k["name"]) for k in kernels]
        _expect(step, kinds, [tuple(k["args"]["grid"]) for k in kernels], name)
        combine += "combine" in kinds
        for k in kernels:
            if _kind(k["name"]) != "other":
                assert re.search(NCU_KERNEL_REGEX_FA3, k["name"]), k["name"]
    assert combine == KINETO[stem][1]


def test_nsys_steps_hold_the_fa3_kernels() -> None:
    stem = "sweep_q32kv4d128_fa3_nsys"
    steps = {s["key"]: s for s in _sidecar(stem)["steps"]}
    con = sqlite3.connect(f"file:{FA3 / stem}.sqlite?mode=ro&immutable=1", uri=True)
    by_corr: dict[int, list[tuple[str, tuple[int, int, int]]]] = defaultdict(list)
    for corr, name, gx, gy, gz in con.execute(
            "SELECT k.correlationId, s.value, k.gridX, k.gridY, k.gridZ FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName ORDER BY k.start"):
        by_corr[corr].append((name, (gx, gy, gz)))
    assert sum(map(len, by_corr.values())) == 50
    runtime = sorted(con.execute("SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME"))
    stamps = [r[0] for r in runtime]
    nvtx = con.execute("SELECT coalesce(e.text, s.value), e.start, e.end, e.globalTid FROM NVTX_EVENTS e "
                       "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59").fetchall()
    decode = [n for n in nvtx if n[0].startswith("decode ")]
    assert len(decode) == len(steps) == 20
    for name, start, end, tid in decode:
        lo, hi = bisect.bisect_left(stamps, start), bisect.bisect_right(stamps, end)
        launched = [k for _, t, c in runtime[lo:hi] if t == tid for k in by_corr.get(c, [])]
        _expect(steps[name.removeprefix("decode ")], [_kind(n) for n, _ in launched], [g for _, g in launched], name)
    # nsys writes template arguments with their types: prepare_varlen_num_blocks_kernel<(int)32, (bool)1>
    names = {n for k in by_corr.values() for n, _ in k}
    assert any(n.startswith("void flash::prepare_varlen_num_blocks_kernel<(int)32, (bool)1>") for n in names)


def _ncu(stem: str) -> list[dict[str, str]]:
    return ncu_rows(FA3 / f"{stem}.ncu.csv")


NCU = {  # stem -> (launches of the main kernel, profiled kernels)
    "sweep_q32kv4d128_fa3_ncu": (16, 37),
    "sweep_q64kv8d128_fa3_ncu": (12, 32),
    "ncu_variants_q32kv4d128_fa3_ncu": (16, 40),
}


@pytest.mark.parametrize("stem", sorted(NCU))
def test_ncu_has_sm_activity_for_every_launch(stem: str) -> None:
    rows = _ncu(stem)
    steps = {s["key"]: s for s in _sidecar(stem)["steps"]}
    nvtx_col = next(c for c in rows[0] if c.startswith("thread Domain:Push/Pop_Range"))
    assert len(rows) == NCU[stem][1]
    by_step: dict[str, list[dict[str, str]]] = defaultdict(list)
    for r in rows:
        by_step[r[nvtx_col].split('"')[1].split(":")[1].removeprefix("decode ")].append(r)
        assert (ncu_num(r["sm__cycles_active.min"]) <= ncu_num(r["sm__cycles_active.avg"])
                <= ncu_num(r["sm__cycles_active.max"]))
    assert sorted(by_step) == sorted(steps) and len(steps) == NCU[stem][0]
    for key, launched in by_step.items():
        kinds = [_kind(r["Kernel Name"]) for r in launched]
        grids = [tuple(int(x) for x in r["Grid Size"].strip("()").split(",")) for r in launched]
        _expect(steps[key], kinds, grids, key)


def test_ncu_shows_the_cap_as_idle_sms() -> None:
    # 1 - avg/max of sm__cycles_active on the main kernel, read with python csv: skew80 shape A balanced at 992
    # (0.018), 91 % idle at 993 where the 209,715-token request is walked unsplit; a forced num_splits=1 already
    # at B = 256 (0.945)
    idle = {}
    for r in _ncu("sweep_q32kv4d128_fa3_ncu"):
        if _kind(r["Kernel Name"]) == "main":
            key = r[next(c for c in r if c.startswith("thread Domain"))]
            tokens = dict(t.split("=") for t in key.split('"')[1].split(":")[1].split()[1:])
            idle[(tokens["splits"], tokens["dist"], int(tokens["bs"]))] = (
                1 - ncu_num(r["sm__cycles_active.avg"]) / ncu_num(r["sm__cycles_active.max"]))
    assert idle[("0", "skew80", 992)] == pytest.approx(0.018, abs=0.01)
    assert idle[("0", "skew80", 993)] == pytest.approx(0.907, abs=0.01)
    assert idle[("1", "skew80", 256)] == pytest.approx(0.945, abs=0.01)
    assert idle[("0", "uniform", 993)] == pytest.approx(0.019, abs=0.01)


def _timing(stem: str) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["dist"], r["batch_size"]): r for r in _json(FA3 / f"{stem}.timing.json.gz")["cases"]}


@pytest.mark.parametrize("stem", ["timing_q32kv4d128_fa3_none", "timing_q64kv8d128_fa3_none",
                                  "timing_variants_q32kv4d128_fa3_none"])
def test_fa3_planner_reproduces_the_split_state_of_every_timed_call(stem: str) -> None:
    """traceinsight's FA3 planner, given each timed case's batch (rebuilt from dist, B and total tokens) and its
    call (num_splits, sm_margin, causal, pack_gqa, max_seqlen_k), gets the split state, the longest request's
    split count and the static split bound FA3's own scheduler metadata had when they were timed: 124 calls, on
    both model shapes, both sides of the 992 cap, and the forced num_splits variants. Across the cap the measured
    time jumps (skewed batches) where the split stops."""
    doc = _json(FA3 / f"{stem}.timing.json.gz")
    heads = (doc["model"]["qo_heads"], doc["model"]["kv_heads"], doc["model"]["head_dim"])
    gpu = gpu_by_key("h200")
    for r in doc["cases"]:
        lens = kv_lens(r["dist"], r["batch_size"], r["total_tokens"])
        assert max(lens) == r["max_kv_len"], r["key"]  # the batch the collector timed
        c = r["call"]
        options = {"num_splits": c["num_splits"], "sm_margin": c["sm_margin"], "causal": c["causal"],
                   "max_seqlen_k": c["max_seqlen_k"], **({} if c["pack_gqa"] is None else {"pack_gqa": c["pack_gqa"]})}
        # kBlockN = 176: the tile of FA3's D = 128 kernel that ran (FlashAttnFwdSm90 ... cute::C<176>)
        p = plan(FA3_BACKEND, Batch(lens, 1, *heads), gpu, 1, block_n=176, **options)
        got = (p.split_kv, max(p.splits), p.details["num_splits_static"])
        assert got == (r["split_kv"], r["max_splits"], r["num_splits_static"]), r["key"]
    assert {r["split_kv"] for r in doc["cases"]} == {True, False}
    if "variants" not in stem:  # the measured cliff where the planner (and FA3) stop splitting
        rows = _timing(stem)
        assert len(rows) == 30 and all(r["backend"] == "fa3" and len(r["samples_ms"]) == 20 for r in rows.values())
        for dist, factor in (("skew80", 4), ("skew40", 2.5)):  # shape B: 4.9x, 2.8x; shape A 9.5x, 5.7x
            assert rows[(dist, 993)]["median_ms"] > factor * rows[(dist, 992)]["median_ms"]
            assert rows[(dist, 992)]["split_kv"] and not rows[(dist, 993)]["split_kv"]
            assert rows[(dist, 993)]["num_splits_static"] > 1 and rows[(dist, 993)]["max_splits"] == 1
        assert rows[("uniform", 993)]["median_ms"] < 1.1 * rows[("uniform", 992)]["median_ms"]


def test_serving_replay_crosses_the_cap() -> None:
    doc = _sidecar("serving_q64kv8d128_fa3_torch")
    steps = [s for s in doc["steps"] if not s["call"]["scheduler_metadata"]]
    assert len(steps) == 200 and min(s["batch_size"] for s in steps) < CAP < max(s["batch_size"] for s in steps)
    for s in steps:
        if s["batch_size"] > CAP:
            assert not s["plan"]["split_kv"]
        elif s["long_requests"]:  # the 131,072-token request is cut below the cap
            assert s["plan"]["split_kv"] and s["plan"]["splits"][s["kv_lens"].index(max(s["kv_lens"]))] > 1
    main = {}
    for name, kernels in _kineto_steps(FA3 / "serving_q64kv8d128_fa3_torch.pt.trace.json.gz"):
        if "meta=0" in name:
            step = int(name.split(" step=")[1].split()[0])
            main[step] = next(k["dur"] for k in kernels if _kind(k["name"]) == "main")
    by_step = {int(s["key"].split(" step=")[1].split()[0]): s for s in steps}
    assert (by_step[21]["batch_size"], by_step[22]["batch_size"]) == (991, 993)
    assert main[22] > 1.5 * main[21]  # 843 us -> 1532 us when the batch passes 992


def test_without_torch_or_the_wheel_a_run_is_one_clear_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(collect, ["sweep", "--backend", "fa3", "--out", str(tmp_path)])
    assert res.exit_code == 2 and res.output.count("\n") == 1
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("fa3_fwd_interface") is None:
        assert res.output == ("traceinsight: error: collecting with --backend fa3 needs torch, the fa3-fwd wheel "
                              "(pip install fa3-fwd==0.0.3: import fa3_fwd_interface) and an NVIDIA Hopper GPU\n")
    assert not list(tmp_path.iterdir())


def test_importing_the_fa3_collector_needs_no_gpu_stack() -> None:
    code = ("import sys, collectors.fa3_decode, collectors.sweep, collectors.serving; "
            "print(sorted(m for m in ('torch', 'fa3_fwd_interface', 'flashinfer') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"
