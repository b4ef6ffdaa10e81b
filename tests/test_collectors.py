"""Collectors: the CPU-side parts (distributions, serving schedule, sidecar writing, CLI errors, the error without
torch or a GPU) and the committed H200 collection in examples/collected/.

Numbers about the committed collection were read independently of this code, on the files themselves:
step counts, split steps and token sums with `zcat F.sidecar.json.gz | python -c 'import json,sys; ...'`;
kernel names, grids and NVTX ranges with `sqlite3 F.sqlite 'select ... from CUPTI_ACTIVITY_KIND_KERNEL ...'`
and `python -c 'import csv ...'` on the ncu CSVs; the trace checks with a standalone script over the Kineto
JSON (user_annotation ranges -> cuda_runtime launches -> kernels by correlation id).
"""

from __future__ import annotations

import bisect
import importlib.util
import sqlite3
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import ncu_num, ncu_rows, read_json, sidecar_in
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors import sidecar as writer
from collectors.cli import build_config, collect
from collectors.config import PATHS, ModelShape, RunConfig, ServingConfig, case_key, serving_key, sweep_key
from collectors.distributions import DISTRIBUTIONS, kv_lens
from collectors.schedule import assign_pages, capture_sizes, graph_size, make_requests, schedule
from collectors.sidecar import PlanRecord, StepRecord
from traceinsight.ingest import TraceDB, load, read_file
from traceinsight.ingest import sidecar as reader
from traceinsight.model import CUDA_CORE, FA2, Batch, gpu_by_key, plan

REPO = Path(__file__).resolve().parents[1]
COLLECTED = REPO / "examples" / "collected"
MERGE = "MergeStates"


_json = read_json


def _sidecar(stem: str) -> dict[str, Any]:
    return sidecar_in(COLLECTED, stem)


# ---------------------------------------------------------------------------------------------- distributions
@settings(max_examples=200, deadline=None)
@given(dist=st.sampled_from(sorted(DISTRIBUTIONS)), batch=st.integers(1, 1024), total=st.integers(1, 1 << 22))
def test_distribution_totals_are_exact(dist: str, batch: int, total: int) -> None:
    d = DISTRIBUTIONS[dist]
    if batch < d.min_batch or total < batch:
        with pytest.raises(ValueError):
            kv_lens(dist, batch, total)
        return
    try:
        lens = kv_lens(dist, batch, total)
    except ValueError as exc:  # only when the long requests leave the short ones nothing
        assert "empty" in str(exc)
        return
    assert len(lens) == batch and sum(lens) == total and min(lens) >= 1
    longs = len(d.long_shares)
    assert lens[:longs] == [int(s * total) for s in d.long_shares]
    shorts = lens[longs:]
    assert max(shorts) - min(shorts) <= 1 and shorts == sorted(shorts, reverse=True)


def test_distribution_shares_of_the_seed_experiment() -> None:
    # 262144 tokens: skew80 holds floor(0.8 * 262144) = 209715 in request 0, as in the H200 captures' meta files
    assert kv_lens("skew80", 384)[:2] == [209715, 137]
    assert kv_lens("two40", 8)[:3] == [104857, 104857, 8739]
    assert kv_lens("uniform", 96)[0] == 2731 and kv_lens("uniform", 96)[-1] == 2730
    assert sum(kv_lens("skew60", 297)) == 262144


@pytest.mark.parametrize(("dist", "batch", "message"), [
    ("skew90", 8, "unknown distribution 'skew90'"),
    ("skew40", 1, "needs a batch of at least 2"),
    ("two40", 2, "needs a batch of at least 3"),
])
def test_distribution_errors(dist: str, batch: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        kv_lens(dist, batch)


# ---------------------------------------------------------------------------------------------- serving schedule
def test_serving_schedule_is_seeded_and_consistent() -> None:
    cfg = ServingConfig(max_batch=64, arrival_rate=1.5, prompt_len=(100, 900), output_len=(5, 40), long_every=10,
                        long_len=5000, initial=32)
    reqs = make_requests(cfg, 120, seed=3)
    assert reqs == make_requests(cfg, 120, seed=3)
    assert [r.rid for r in reqs if r.long] == [r.rid for r in reqs if (r.rid + 1) % 10 == 0]
    assert all(r.prompt_len == 5000 for r in reqs if r.long)
    steps = schedule(reqs, cfg, 120)
    by_rid = {r.rid: r for r in reqs}
    last_len: dict[int, int] = {}
    decoded: dict[int, int] = defaultdict(int)
    for s in steps:
        assert 1 <= s.batch_size <= cfg.max_batch and len(set(s.rids)) == s.batch_size
        for rid, n in zip(s.rids, s.kv_lens, strict=True):
            assert by_rid[rid].arrival <= s.index
            assert n == last_len.get(rid, by_rid[rid].prompt_len) + 1  # one token per step
            last_len[rid] = n
            decoded[rid] += 1
    assert all(decoded[rid] <= by_rid[rid].output_len for rid in decoded)
    pages, pool = assign_pages(reqs, steps, page_size=16)
    for s in steps:  # running requests never share a page, page 0 (CUDA-graph padding) is never given out
        owned = [p for rid in s.rids for p in pages[rid]]
        assert len(owned) == len(set(owned)) and 0 not in owned and max(owned) < pool
        assert all(len(pages[rid]) * 16 >= n for rid, n in zip(s.rids, s.kv_lens, strict=True))


def test_capture_ladder() -> None:
    sizes = capture_sizes(ServingConfig(max_batch=40))
    assert sizes == [1, 2, 4, 8, 16, 32, 40]
    assert [graph_size(b, sizes) for b in (1, 3, 9, 33, 40)] == [1, 4, 16, 40, 40]
    with pytest.raises(ValueError):
        graph_size(41, sizes)


# ---------------------------------------------------------------------------------------------- sidecar writing
def _doc(batch: int = 3) -> dict[str, Any]:
    lens = kv_lens("skew80", batch, 4096)
    steps = [StepRecord(sweep_key("cuda-core", "skew80", batch, s), lens, "cuda-core", "flashinfer-cuda-core", False,
                        PlanRecord(batch + 5, True, 512, [batch + 5, 0, 0, 0, 0, 0, 0, 0, 0, 1]), {"dist": "skew80"})
             for s in range(2)]
    return writer.document({"name": "NVIDIA H200", "num_sms": 132}, {"torch": "2.11.0", "flashinfer": "0.6.1"},
                           ModelShape(kv_dtype="fp8_e4m3").to_sidecar(), steps, run={"kind": "sweep"})


@pytest.mark.parametrize("name", ["s.sidecar.json", "s.sidecar.json.gz"])
def test_sidecar_round_trip_through_the_reader(tmp_path: Path, name: str) -> None:
    doc = _doc()
    path = writer.write(tmp_path / name, doc)
    assert _json(path) == doc
    ingest, _ = read_file(path)
    assert ingest.format == "sidecar" and ingest.format_version == "traceinsight.sidecar/1"
    db = TraceDB()
    rows = db.rows("SELECT * FROM batches WHERE trace_id = $t", {"t": db.add(ingest, path)})
    assert [r["step_key"] for r in rows] == ["path=cuda-core dist=skew80 bs=3 step=0",
                                             "path=cuda-core dist=skew80 bs=3 step=1"]
    assert rows[0]["kv_lens"] == [3276, 410, 410] and rows[0]["kv_dtype"] == "float8_e4m3fn"
    assert (rows[0]["planned_padded_batch"], rows[0]["planned_split_kv"], rows[0]["planned_chunk_tokens"]) == (
        8, True, 512)


def test_sidecar_writer_refuses_what_the_reader_rejects(tmp_path: Path) -> None:
    doc = _doc()
    doc["steps"][1]["key"] = doc["steps"][0]["key"]
    with pytest.raises(Exception, match="duplicate key"):
        writer.write(tmp_path / "bad.sidecar.json", doc)
    assert not list(tmp_path.iterdir())


def test_step_keys_match_their_range_names() -> None:
    assert reader.key_matches(case_key("tc-fa2", "uniform", 8), "decode " + sweep_key("tc-fa2", "uniform", 8, 2))
    assert not reader.key_matches(case_key("tc-fa2", "uniform", 8), "decode " + sweep_key("tc-auto", "uniform", 8, 2))
    assert serving_key("cuda-core", 7, 144, live=130) == "path=cuda-core step=7 bs=144 live=130"
    assert PATHS["tc-auto"].sidecar_path == "tensor-core"


def _config(args: list[str]) -> RunConfig:
    """The RunConfig the command builds from `args` (parsed by click, as on the command line)."""
    params = dict(collect.make_context("collect", args).params)
    return build_config(params.pop("kind"), params.pop("out"), **params)


def test_run_config_json_round_trip() -> None:
    cfg = _config(["serving", "--out", "/tmp/o", "--cuda-graph", "--capture-sizes", "8,64,256"])
    assert cfg.name == "serving_q32kv4d128_graph_torch" and cfg.serving.capture_sizes == (8, 64, 256)
    assert cfg.steps == 200 and cfg.profiler == "torch"
    assert RunConfig.from_json(cfg.to_json()) == cfg
    timing = _config(["timing", "--out", "o", "--kv-heads", "8", "--qo-heads", "64", "--kv-dtype", "fp8_e4m3"])
    assert (timing.name, timing.profiler, timing.steps) == ("timing_q64kv8d128_fp8_none", "none", 30)


def test_ncu_sections_pick_the_details_page() -> None:
    raw = _config(["sweep", "--out", "o", "--profiler", "ncu"])
    assert raw.ncu_sections == ()  # the raw page with NCU_METRICS, as before
    details = _config(["sweep", "--out", "o", "--profiler", "ncu", "--ncu-sections",
                       "SpeedOfLight, LaunchStats,Occupancy,WorkloadDistribution"])
    assert details.ncu_sections == ("SpeedOfLight", "LaunchStats", "Occupancy", "WorkloadDistribution")
    assert details.ncu_metrics == raw.ncu_metrics and len(raw.ncu_metrics) == 21  # min/max SM cycles exact
    assert RunConfig.from_json(details.to_json()) == details
    alone = _config(["sweep", "--out", "o", "--profiler", "ncu", "--ncu-sections", "SpeedOfLight",
                     "--ncu-metrics", "none"])
    assert (alone.ncu_sections, alone.ncu_metrics) == (("SpeedOfLight",), ())


# ---------------------------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize("args", [
    ["bogus", "--out", "o"],
    ["sweep"],
    ["sweep", "--out", "o", "--dists", "uniform,skew90"],
    ["sweep", "--out", "o", "--paths", "tensor"],
    ["sweep", "--out", "o", "--batch-sizes", "8,-16"],
    ["sweep", "--out", "o", "--batch-sizes", "8,x"],
    ["sweep", "--out", "o", "--kv-heads", "-4"],
    ["sweep", "--out", "o", "--qo-heads", "30", "--kv-heads", "4"],
    ["sweep", "--out", "o", "--steps", "0"],
    ["sweep", "--out", "o", "--steps", "abc"],
    ["sweep", "--out", "o", "--total-tokens", "4", "--batch-sizes", "8"],
    ["serving", "--out", "o", "--prompt-len", "900:100"],
    ["serving", "--out", "o", "--cuda-graph", "--capture-sizes", "1,2", "--max-batch", "8"],
    ["timing", "--out", "o", "--profiler", "nsys"],
    ["sweep", "--out", "o", "--profiler", "ncu", "--ncu-sections", "SpeedOfLight,--set full"],
    ["sweep", "--out", "o", "--profiler", "ncu", "--ncu-metrics", "none"],
])
def test_cli_argument_errors_are_one_line_exit_2(args: list[str]) -> None:
    res = CliRunner().invoke(collect, args)
    assert res.exit_code == 2, res.output
    lines = res.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceinsight: error: collect: "), res.output


def test_cli_registered_in_traceinsight() -> None:
    from traceinsight.cli import main

    res = CliRunner().invoke(main, ["collect", "sweep", "--out", "o", "--dists", "skew90"])
    assert res.exit_code == 2 and res.output.splitlines() == [
        "traceinsight: error: collect: --dists: unknown 'skew90' (choose from uniform, skew40, skew60, skew80, two40)"]


@pytest.mark.parametrize("profiler", ["torch", "nsys", "ncu"])
def test_running_without_torch_or_gpu_is_one_clear_line(tmp_path: Path, profiler: str) -> None:
    res = CliRunner().invoke(collect, ["sweep", "--out", str(tmp_path), "--profiler", profiler])
    assert res.exit_code == 2
    if importlib.util.find_spec("torch") is None:
        assert res.output == ("traceinsight: error: collecting needs the [collect] extra: pip install "
                              "'traceinsight-attention[collect]' (torch, flashinfer-python==0.6.1, nvtx) and an "
                              "NVIDIA GPU\n")
    else:  # torch present: either flashinfer is missing or there is no CUDA device
        assert res.output.startswith("traceinsight: error: collecting needs ") and res.output.count("\n") == 1
    assert not list(tmp_path.iterdir())


def test_importing_the_cli_needs_no_gpu_stack() -> None:
    code = ("import sys, collectors.cli, collectors.runner, collectors.serving, collectors.timing; "
            "print(sorted(m for m in ('torch', 'flashinfer', 'nvtx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------- the collection
KINETO = {  # trace stem -> (steps, split steps), counted in the sidecars with zcat | python
    "sweep_q32kv4d128_torch": (260, 120),
    "sweep_q64kv8d128_torch": (450, 110),
    "sweep_q32kv4d128_fp8_torch": (180, 54),
    "serving_q64kv8d128_torch": (400, 25),
    "serving_q64kv8d128_graph_torch": (400, 221),
}


def _kineto_steps(stem: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """(range name, kernels launched inside it) for every 'decode ...' record_function range: the range holds
    the host launch calls (cudaLaunchKernel / cudaGraphLaunch ...), whose correlation ids name the kernels."""
    events = _json(COLLECTED / f"{stem}.pt.trace.json.gz")["traceEvents"]
    kernels: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "kernel":
            kernels[e["args"]["correlation"]].append(e)
    launches = sorted((e["ts"], e["tid"], e["args"].get("correlation")) for e in events
                      if e.get("cat") == "cuda_runtime")
    stamps = [t for t, _, _ in launches]
    out = []
    for r in (e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("decode ")):
        lo, hi = bisect.bisect_left(stamps, r["ts"]), bisect.bisect_right(stamps, r["ts"] + r["dur"])
        out.append((r["name"], [k for _, tid, c in launches[lo:hi] if tid == r["tid"] for k in kernels.get(c, [])]))
    return out


@pytest.mark.parametrize("stem", sorted(KINETO))
def test_collected_split_kv_matches_the_merge_kernel_kineto(stem: str) -> None:
    steps = {s["key"]: s for s in _sidecar(stem)["steps"]}
    seen = _kineto_steps(stem)
    assert len(seen) == len(steps) == KINETO[stem][0]
    assert sum(s["plan"]["split_kv"] for s in steps.values()) == KINETO[stem][1]
    for name, kernels in seen:
        step = steps[name.removeprefix("decode ")]
        attention = [k for k in kernels if MERGE not in k["name"]]
        merged = any(MERGE in k["name"] for k in kernels)
        assert len(attention) == 1, name
        assert merged == step["plan"]["split_kv"], name  # a merge kernel follows iff the planner split KV
        if step["plan"]["padded_batch_size"] is not None:  # grid.x is the planner's padded batch
            grid = attention[0]["args"]["grid"]
            assert grid[0] == step["plan"]["padded_batch_size"], name


@pytest.mark.parametrize(("stem", "ranges", "kernels"), [
    ("sweep_q64kv8d128_nsys", 56, 96), ("serving_q64kv8d128_graph_nsys", 100, 121)])
def test_collected_split_kv_matches_the_merge_kernel_nsys(stem: str, ranges: int, kernels: int) -> None:
    steps = {s["key"]: s for s in _sidecar(stem)["steps"]}
    con = sqlite3.connect(f"file:{COLLECTED / stem}.sqlite?mode=ro&immutable=1", uri=True)
    by_corr: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for corr, name, grid_x in con.execute("SELECT k.correlationId, s.value, k.gridX FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                          "JOIN StringIds s ON s.id = k.shortName"):
        by_corr[corr].append((name, grid_x))
    assert sum(map(len, by_corr.values())) == kernels
    runtime = sorted(con.execute("SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME"))
    stamps = [r[0] for r in runtime]
    nvtx = con.execute("SELECT coalesce(e.text, s.value), e.start, e.end, e.globalTid FROM NVTX_EVENTS e "
                       "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59").fetchall()  # push/pop
    decode = [n for n in nvtx if n[0].startswith("decode ")]
    assert len(decode) == len(steps) == ranges
    for name, start, end, tid in decode:
        lo, hi = bisect.bisect_left(stamps, start), bisect.bisect_right(stamps, end)
        launched = [k for _, t, c in runtime[lo:hi] if t == tid for k in by_corr.get(c, [])]
        step = steps[name.removeprefix("decode ")]
        attention = [g for n, g in launched if MERGE not in n]
        assert attention == [step["plan"]["padded_batch_size"]], name
        assert any(MERGE in n for n, _ in launched) == step["plan"]["split_kv"], name


def _ncu(stem: str) -> list[dict[str, str]]:
    return ncu_rows(COLLECTED / f"{stem}.ncu.csv")


def test_collected_ncu_holdout_has_sm_activity_for_every_case() -> None:
    rows = _ncu("ncu_holdout")
    steps = {s["key"]: s for s in _sidecar("ncu_holdout")["steps"]}
    nvtx_col = next(c for c in rows[0] if c.startswith("thread Domain:Push/Pop_Range"))
    attention = [r for r in rows if MERGE not in r["Kernel Name"]]
    assert len(rows) == 32 and len(attention) == 20 == len(steps)
    assert len(rows) - len(attention) == sum(s["plan"]["split_kv"] for s in steps.values()) == 12
    cases = {}
    for r in attention:
        key = r[nvtx_col].split('"')[1].split(":")[1].removeprefix("decode ")
        step = steps[key]
        assert r["Grid Size"] == f"({step['plan']['padded_batch_size']}, 4, 1)"
        assert (ncu_num(r["sm__cycles_active.min"]) <= ncu_num(r["sm__cycles_active.avg"])
                <= ncu_num(r["sm__cycles_active.max"]))
        cases[(step["dist"], step["batch_size"])] = (ncu_num(r["sm__cycles_active.avg"])
                                                    / ncu_num(r["sm__cycles_active.max"]))
    assert sorted(cases) == sorted((d, b) for d in ("uniform", "skew40", "skew80", "two40")
                                   for b in (64, 192, 288, 296, 320))
    # avg/max read with python csv: balanced uniform B=64 0.967; skew80 with split-KV off (B=320) 0.035
    assert cases[("uniform", 64)] == pytest.approx(0.967, abs=0.005)
    assert cases[("skew80", 320)] == pytest.approx(0.035, abs=0.005)


@pytest.mark.parametrize("path", sorted(COLLECTED.glob("*.sidecar.json*")), ids=lambda p: p.name)
def test_collected_sidecars_validate_and_load(path: Path) -> None:
    doc = _json(path)
    reader.validate(doc, path)
    assert doc["gpu"] == {**doc["gpu"], "name": "NVIDIA H200", "num_sms": 132}
    assert doc["software"]["flashinfer"] == "0.6.1"
    sweep_like = not path.name.startswith("serving")
    for s in doc["steps"]:
        assert s["batch_size"] == len(s["kv_lens"])
        if sweep_like:
            assert sum(s["kv_lens"]) == 262144  # exact totals
    db, (tid,) = load([path])
    assert db.rows("SELECT count(*) AS n FROM batches WHERE trace_id = $t", {"t": tid})[0]["n"] == len(doc["steps"])


def test_planners_reproduce_the_split_state_flashinfer_recorded_in_the_timing_run() -> None:
    """Out of the planners' own test data (the shared sweeps are shape A, H_q 32 / H_kv 4): on shape B (H_q 64 /
    H_kv 8) every CUDA-core and FA2 case of the timing run, its batch rebuilt from (dist, B, total tokens), gets
    from traceinsight's planner the split state and padded batch FlashInfer's plan recorded at collection. The
    CUDA-core cliff follows: split-KV stops once B * 8 reaches 132 * 9 = 1188 (B >= 149), and skew80 then takes
    13.6 ms against 1.4 ms at B = 128 (medians of 20 CUDA-event runs); FA2 from 2 * 132 / 8 = 33."""
    gpu = gpu_by_key("h200")
    rows = _json(COLLECTED / "timing_q64kv8d128_none.timing.json.gz")["cases"]
    planner = {"flashinfer-cuda-core": (CUDA_CORE, 9), "flashinfer-fa2": (FA2, 2)}  # (backend, CTAs per SM)
    checked = defaultdict(list)
    for r in rows:
        if r["backend"] not in planner:
            continue
        lens = kv_lens(r["dist"], r["batch_size"], r["total_tokens"])
        assert max(lens) == r["max_kv_len"], r["key"]  # the same batch the collector ran
        backend, occ = planner[r["backend"]]
        p = plan(backend, Batch(lens, 16, 64, 8, 128), gpu, occ)
        assert (p.split_kv, p.padded_batch_size) == (r["split_kv"], r["padded_batch_size"]), r["key"]
        checked[r["backend"]].append((r["dist"], r["batch_size"], p.split_kv))
    assert {k: len(v) for k, v in checked.items()} == {"flashinfer-cuda-core": 75, "flashinfer-fa2": 75}
    # skewed batches from 148 (no chunk left to split there either; uniform ones from B = 96, where two chunks
    # each would exceed 148 CTAs)
    assert min(b for d, b, split in checked["flashinfer-cuda-core"] if not split and d != "uniform") == 148
    assert max(b for _, b, split in checked["flashinfer-fa2"] if split) < 33
    core = {(r["dist"], r["batch_size"]): r["median_ms"] for r in rows if r["backend"] == "flashinfer-cuda-core"}
    assert core[("skew80", 149)] > 5 * core[("skew80", 128)]
