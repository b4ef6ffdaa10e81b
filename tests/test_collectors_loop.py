"""The `loop` collector's CPU side: the decode loop's schedule (collectors/loop_plan.py: event placement, batch
composition, query rows and KV lengths, pages, determinism), its options through the CLI (one-line errors, exit
2), its step keys against range names, its sidecar steps (qo_lens, truth) through traceinsight's reader; and the
H200 captures in examples/loop/ (keys match one range each, the truth, kernels per step, the slow steps)."""

from __future__ import annotations

import bisect
import functools
import gzip
import importlib.util
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from collectors import sidecar as writer
from collectors.cli import build_config, collect
from collectors.config import LoopConfig, ModelShape, RunConfig
from collectors.loop_plan import (
    SCENARIOS,
    LoopPlan,
    nvtx_key,
    nvtx_name,
    parse_events,
    plan_loop,
    torch_key,
)
from collectors.sidecar import PlanRecord, StepRecord
from traceinsight.ingest import TraceDB, read_file
from traceinsight.ingest import sidecar as reader

REPO = Path(__file__).resolve().parents[1]
DEFAULT_EVENTS = [("host-sleep", 22), ("host-cpu", 44), ("prefill", 66), ("host-sleep", 88), ("host-cpu", 110),
                  ("prefill", 132), ("chunked-prefill", 154), ("long-join", 176), ("long-join", 198)]


def _plan(cfg: LoopConfig | None = None, steps: int = 240, warmup: int = 10, seed: int = 0) -> LoopPlan:
    return plan_loop(cfg or LoopConfig(), steps, warmup, seed, page_size=16)


# ---------------------------------------------------------------------------------------------- events
def test_default_scenario_places_every_event_with_clean_steps_around_it() -> None:
    plan = _plan()
    assert [(e.kind, e.step) for e in plan.events] == DEFAULT_EVENTS
    assert [e.span for e in plan.events] == [1] * 6 + [4, 1, 1]  # 4096-token prompt in 1024-token chunks
    assert [(e.tokens, e.role) for e in plan.events[-2:]] == [(32768, "onset"), (131072, None)]
    assert all(4096 <= e.tokens <= 8192 for e in plan.events if e.kind == "prefill")
    eventful = [s.measured for s in plan.measured if s.event]
    assert eventful == [22, 44, 66, 88, 110, 132, 154, 155, 156, 157, 176, 198]
    # every event is at least 18 clean steps away from the previous one, the last has 41 clean steps after it
    starts = [e.step for e in plan.events]
    ends = [e.step + e.span - 1 for e in plan.events]
    assert min(b - a for a, b in zip(ends, starts[1:], strict=False)) >= 18
    assert starts[0] == 22 and 240 - 1 - ends[-1] == 41
    # the warm-up steps carry no event and no measured index
    assert all(s.event is None and s.measured is None for s in plan.steps[:10])
    assert [s.measured for s in plan.measured] == list(range(240))


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_scenarios_hold_their_events(scenario: str) -> None:
    plan = _plan(LoopConfig(scenario=scenario), steps=200)
    kinds = [e.kind for e in plan.events]
    expected = [k if k != "onset" else "long-join" for k in SCENARIOS[scenario]]
    assert kinds == expected
    assert sum(s.event is not None for s in plan.measured) == sum(e.span for e in plan.events)


def test_explicit_events_and_no_onset() -> None:
    cfg = LoopConfig(events="long-join@30:65536, host-cpu@5,prefill@12:5000,chunked-prefill@18:2500")
    plan = _plan(cfg, steps=40)
    assert [(e.kind, e.step, e.tokens, e.span) for e in plan.events] == [
        ("host-cpu", 5, None, 1), ("prefill", 12, 5000, 1), ("chunked-prefill", 18, 2500, 3),
        ("long-join", 30, 65536, 1)]
    chunks = [s for s in plan.measured if s.event == "chunked-prefill"]
    assert [s.tokens for s in chunks] == [1024, 1024, 452]
    assert [e.kind for e in _plan(LoopConfig(scenario="join", onset_len=0)).events] == ["long-join"]
    assert parse_events("host-sleep@0,, long-join@7:9 ") == [("host-sleep", 0, None), ("long-join", 7, 9)]


@pytest.mark.parametrize(("events", "message"), [
    ("bogus@3", "is not KIND@STEP"),
    ("host-sleep@3:100", "host stalls take no token count"),
    ("prefill@3,host-cpu@3", "events overlap"),
    ("chunked-prefill@3:4096,host-cpu@5", "events overlap"),
    ("long-join@40", "too few"),
    ("prefill@x", "is not KIND@STEP"),
])
def test_event_errors(events: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _plan(LoopConfig(events=events), steps=40)


def test_the_default_scenario_needs_its_steps() -> None:
    with pytest.raises(ValueError, match=r"--steps 150 is too few .* at least 199"):
        _plan(steps=150)


# ---------------------------------------------------------------------------------------------- batches
def test_batches_grow_one_token_per_decode_step_and_requests_join() -> None:
    plan = _plan()
    b = 48
    ctx: dict[int, int] = {}  # KV tokens after the request's last step
    decoding: list[int] = list(range(b))
    for s in plan.steps:
        assert len(s.rids) == len(s.qo_lens) == len(s.kv_lens) == s.batch_size
        assert all(1 <= q <= k for q, k in zip(s.qo_lens, s.kv_lens, strict=True))
        if s.phase == "prefill":  # the prompt alone, no decode rows (vLLM V0)
            assert s.event == "prefill" and s.batch_size == 1 and s.qo_lens == s.kv_lens == (s.tokens,)
            assert s.rids[0] not in ctx
            decoding.append(s.rids[0])
        elif s.phase == "mixed":  # the decode batch plus one chunk, in one attention call
            assert s.event == "chunked-prefill" and s.qo_lens == (1,) * (s.batch_size - 1) + (s.tokens,)
            rid = s.rids[-1]
            assert list(s.rids[:-1]) == decoding
            assert s.kv_lens[-1] == ctx.get(rid, 0) + s.tokens
            if s.kv_lens[-1] == 4096:
                decoding.append(rid)
        else:
            assert set(s.qo_lens) == {1}
            if s.event == "long-join":  # joins at the end with exactly its KV
                assert s.rids[-1] not in ctx and s.kv_lens[-1] == s.tokens
                decoding.append(s.rids[-1])
            assert list(s.rids) == decoding
        for rid, q, k in zip(s.rids, s.qo_lens, s.kv_lens, strict=True):
            if rid in ctx:
                assert k == ctx[rid] + q  # one token per decode step, a chunk's tokens per chunk
            ctx[rid] = k
    sizes = [s.batch_size for s in plan.measured if s.phase == "decode"]
    assert sizes[0] == b and sizes[-1] == b + 5  # 2 prefills, 1 chunked prefill, 2 joins
    assert plan.decode_sizes() == [48, 49, 50, 51, 52, 53]
    assert max(plan.measured[-1].kv_lens) == 131072 + 41
    assert all(512 <= r.prompt <= 4096 for r in plan.requests if r.how == "steady")


def test_prefill_steps_hold_no_decode_rows_and_mixed_steps_sample_every_request() -> None:
    plan = _plan()
    pre = next(s for s in plan.measured if s.phase == "prefill")
    assert pre.sampled_rows == [pre.tokens - 1] and pre.rows == pre.tokens
    mixed = next(s for s in plan.measured if s.phase == "mixed")
    assert mixed.rows == mixed.batch_size - 1 + 1024
    assert mixed.sampled_rows[:3] == [0, 1, 2] and mixed.sampled_rows[-1] == mixed.rows - 1


def test_pages_and_slots() -> None:
    plan = _plan(LoopConfig(batch=8, prompt_len=(5, 40), prefill_len=(30, 60), chunk=16, chunk_prompt=40,
                            join_len=500, onset_len=100, first=3, spacing=4), steps=40, warmup=3)
    page = 16
    owned = [p for r in plan.requests for p in plan.pages[r.rid]]
    assert len(owned) == len(set(owned)) and 0 not in owned and max(owned) == plan.pool_pages - 1
    written: set[tuple[int, int]] = set()
    for s in plan.steps:
        pg, off = plan.slots(s, page)
        assert len(pg) == len(off) == s.rows
        for rid, k, pages in zip(s.rids, s.kv_lens, plan.page_lists(s, page), strict=True):
            assert len(pages) * page >= k > (len(pages) - 1) * page
            assert set(pages) <= set(plan.pages[rid])
        new = set(zip(pg, off, strict=True))
        assert len(new) == s.rows and not new & written  # every new KV token gets its own, fresh slot
        written |= new


def test_schedule_is_deterministic_by_seed() -> None:
    assert _plan(seed=5) == _plan(seed=5)
    a, b = _plan(seed=5), _plan(seed=6)
    assert a.steps[0].kv_lens != b.steps[0].kv_lens
    assert [e.step for e in a.events] == [e.step for e in b.events]


def test_mlp_width() -> None:
    assert LoopConfig().mlp_width(8192) == 20480 and LoopConfig().mlp_width(4096) == 10240
    assert LoopConfig().mlp_width(1000) == 2560 and LoopConfig(intermediate=28672).mlp_width(8192) == 28672


# ---------------------------------------------------------------------------------------------- step keys
def test_step_keys_match_their_ranges() -> None:
    assert torch_key(0, 2) == "ProfilerStep#2" and reader.key_matches(torch_key(0, 2), "ProfilerStep#2")
    assert not reader.key_matches(torch_key(0, 2), "ProfilerStep#20")
    assert nvtx_name(12) == "step id=12" and reader.key_matches(nvtx_key(12), nvtx_name(12))
    assert not reader.key_matches(nvtx_key(1), nvtx_name(10))


# ---------------------------------------------------------------------------------------------- the CLI
def _config(args: list[str]) -> RunConfig:
    params = dict(collect.make_context("collect", args).params)
    return build_config(params.pop("kind"), params.pop("out"), **params)


def test_loop_config_defaults_and_json_round_trip() -> None:
    cfg = _config(["loop", "--out", "o", "--qo-heads", "64", "--kv-heads", "8"])
    assert (cfg.name, cfg.paths, cfg.steps, cfg.warmup, cfg.profiler) == (
        "loop_q64kv8d128_fa2_torch", ("tc-fa2",), 240, 10, "torch")
    assert cfg.loop == LoopConfig()
    assert RunConfig.from_json(cfg.to_json()) == cfg
    graph = _config(["loop", "--out", "o", "--paths", "cuda-core", "--cuda-graph", "--batch", "160",
                     "--prompt-len", "256:1024", "--onset-len", "12288", "--profiler", "nsys",
                     "--events", "host-sleep@3,long-join@9", "--steps", "20", "--sleep-ms", "2.5"])
    assert graph.name == "loop_q32kv4d128_core_graph_nsys"
    assert graph.loop == replace(LoopConfig(), batch=160, prompt_len=(256, 1024), onset_len=12288,
                                 events="host-sleep@3,long-join@9", sleep_ms=2.5)
    assert RunConfig.from_json(graph.to_json()) == graph
    # the other kinds keep their defaults
    sweep = _config(["sweep", "--out", "o"])
    assert (sweep.paths, sweep.warmup) == (("cuda-core", "tc-fa2"), 5)


@pytest.mark.parametrize("args", [
    ["loop", "--out", "o", "--paths", "cuda-core,tc-fa2"],
    ["loop", "--out", "o", "--paths", "tc-auto", "--split-kv", "off"],  # disable_split_kv: the FA2 planner only
    ["loop", "--out", "o", "--profiler", "ncu"],
    ["loop", "--out", "o", "--kv-dtype", "fp8_e4m3"],
    ["loop", "--out", "o", "--batch", "0"],
    ["loop", "--out", "o", "--layers", "0"],
    ["loop", "--out", "o", "--vocab", "1"],
    ["loop", "--out", "o", "--steps", "100"],
    ["loop", "--out", "o", "--warmup", "2"],
    ["loop", "--out", "o", "--events", "bogus@3"],
    ["loop", "--out", "o", "--events", "prefill@3,host-cpu@3"],
    ["loop", "--out", "o", "--prefill-len", "9000:4096"],
    ["loop", "--out", "o", "--prompt-len", "0:10"],
    ["loop", "--out", "o", "--chunk", "0"],
    ["loop", "--out", "o", "--spacing", "0"],
    ["loop", "--out", "o", "--onset-len", "-1"],
    ["loop", "--out", "o", "--stall-factor", "-1"],
    ["loop", "--out", "o", "--sleep-ms", "nan"],
    ["loop", "--out", "o", "--scenario", "nope"],
    ["loop", "--out", "o", "--batch", "x"],
])
def test_loop_argument_errors_are_one_line_exit_2(args: list[str]) -> None:
    res = CliRunner().invoke(collect, args)
    assert res.exit_code == 2, res.output
    lines = res.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceinsight: error: collect: "), res.output


def test_loop_error_messages_name_the_option() -> None:
    def err(*args: str) -> str:
        return CliRunner().invoke(collect, ["loop", "--out", "o", *args]).output.strip()

    assert err("--paths", "cuda-core,tc-fa2") == ("traceinsight: error: collect: loop runs one decode path: "
                                                  "--paths cuda-core or --paths tc-fa2 or --paths tc-auto")
    assert err("--steps", "100") == ("traceinsight: error: collect: --steps 100 is too few for the events "
                                     "(host-sleep@22, host-cpu@44, prefill@66, host-sleep@88, host-cpu@110, "
                                     "prefill@132, chunked-prefill@154, long-join@176, long-join@198): they need "
                                     "at least 199 measured steps")
    assert err("--batch", "0") == "traceinsight: error: collect: --batch must be at least 1, got 0"


def test_running_the_loop_without_torch_or_gpu_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(collect, ["loop", "--out", str(tmp_path), "--steps", "30", "--scenario", "none"])
    assert res.exit_code == 2 and res.output.startswith("traceinsight: error: collecting needs ")
    assert res.output.count("\n") == 1 and not list(tmp_path.iterdir())


def test_importing_the_loop_needs_no_gpu_stack() -> None:
    code = ("import sys, collectors.loop, collectors.loop_plan; "
            "print(sorted(m for m in ('torch', 'flashinfer', 'nvtx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------- the sidecar
def test_loop_sidecar_steps_validate_and_load(tmp_path: Path) -> None:
    plan = _plan(LoopConfig(batch=4, prompt_len=(10, 20), chunk=32, join_len=4096,
                            events="host-sleep@2,prefill@5:64,chunked-prefill@8:64,long-join@12"), steps=16, warmup=3)
    steps = []
    for s in plan.measured:
        truth = {"event": s.event, "ms": 3.5 if s.event in ("host-sleep", "host-cpu") else None,
                 "tokens": s.tokens, "layers": 4}
        steps.append(StepRecord(torch_key(s.measured, 2), list(s.kv_lens), "cuda-core", "flashinfer-cuda-core",
                                False, PlanRecord(160, False, None, [160, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
                                {"qo_lens": list(s.qo_lens), "truth": truth}))
    doc = writer.document({"name": "NVIDIA H200", "num_sms": 132}, {"flashinfer": "0.6.1"},
                          ModelShape(64, 8).to_sidecar(), steps, run={"kind": "loop"})
    assert doc["schema"] == "traceinsight.sidecar/1.1"  # the minor version that adds qo_lens
    reader.validate(doc)
    path = writer.write(tmp_path / "loop.sidecar.json.gz", doc)
    ingest, _ = read_file(path)
    db = TraceDB()
    rows = db.rows("SELECT step_key, batch_size FROM batches WHERE trace_id = $t ORDER BY step_key",
                   {"t": db.add(ingest, path)})
    assert len(rows) == 16 and {r["step_key"] for r in rows} == {f"ProfilerStep#{i}" for i in range(2, 18)}
    events = [s["truth"]["event"] for s in doc["steps"]]
    assert events.count("chunked-prefill") == 2 and events.count("prefill") == 1


# ---------------------------------------------------------------------------------------------- the H200 captures
# examples/loop/: five captures of the default scenario on an H200 (examples/loop/README.md). Steps and their
# kernels are read with examples/loop/step_times.py (stdlib only: ProfilerStep#N user_annotation or `step id=N`
# NVTX ranges -> runtime/driver launches on the range's thread -> kernels by correlation id); the numbers below
# were first read off its output and cross-checked by hand on the JSON (gpu_memcpy, cudaGraphLaunch events).
LOOP = REPO / "examples" / "loop"
CAPTURES = {  # stem -> (trace suffix, path, CUDA graph, first key)
    "loop_fa2_torch": (".pt.trace.json.gz", "tc-fa2", False, "ProfilerStep#2"),
    "loop_core_torch": (".pt.trace.json.gz", "cuda-core", False, "ProfilerStep#2"),
    "loop_core_graph_torch": (".pt.trace.json.gz", "cuda-core", True, "ProfilerStep#2"),
    "loop_fa2_nsys": (".sqlite", "tc-fa2", False, "id=10"),
    "loop_core_graph_nsys": (".sqlite", "cuda-core", True, "id=10"),
}
TRUTH = [("host-sleep", [22]), ("host-cpu", [44]), ("prefill", [66]), ("host-sleep", [88]), ("host-cpu", [110]),
         ("prefill", [132]), ("chunked-prefill", [154, 155, 156, 157]), ("long-join", [176]), ("long-join", [198])]


@functools.cache
def _step_times() -> Any:
    spec = importlib.util.spec_from_file_location("loop_step_times", LOOP / "step_times.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@functools.cache
def _capture(stem: str) -> tuple[dict[str, Any], list[Any]]:
    """(sidecar, [(sidecar step, trace Step)] in step order) of a capture."""
    doc = json.loads(gzip.decompress((LOOP / f"{stem}.sidecar.json.gz").read_bytes()))
    st = _step_times()
    trace = LOOP / f"{stem}{CAPTURES[stem][0]}"
    ranges = st.nsys_steps(trace) if trace.suffix == ".sqlite" else st.kineto_steps(trace)
    pairs = []
    for s in doc["steps"]:
        hit = [r for r in ranges if reader.key_matches(s["key"], r.name)]
        assert len(hit) == 1, s["key"]  # every key names exactly one range
        pairs.append((s, hit[0]))
    assert len(ranges) == len(doc["steps"])
    return doc, pairs


@pytest.mark.parametrize("stem", sorted(CAPTURES))
def test_loop_captures_sidecars_hold_the_truth(stem: str) -> None:
    doc, pairs = _capture(stem)
    reader.validate(doc, stem)
    _, path, graph, first = CAPTURES[stem]
    assert doc["schema"] == "traceinsight.sidecar/1.1" and doc["gpu"]["name"] == "NVIDIA H200"
    assert doc["run"]["kind"] == "loop" and doc["run"]["path"] == path and doc["run"]["cuda_graph"] is graph
    steps = doc["steps"]
    assert len(steps) == 240 and steps[0]["key"] == first
    events = [(e["event"], [int(k.split("#")[-1].split("=")[-1]) - int(first.split("#")[-1].split("=")[-1])
                            for k in e["keys"]]) for e in doc["run"]["events"]]
    assert events == TRUTH
    assert [(s["step"], s["truth"]["event"]) for s in steps if s["truth"]["event"]] == [
        (i, kind) for kind, idx in TRUTH for i in idx]
    for s in steps:
        assert len(s["qo_lens"]) == len(s["kv_lens"]) == s["batch_size"] and s["truth"]["layers"] == 4
        if s["phase"] == "decode":
            assert set(s["qo_lens"]) == {1} and s["cuda_graph"] is graph
            assert s["plan"]["split_kv"] is False  # the batch is at or above the path's split-KV threshold
        else:
            assert s["backend"] == "flashinfer-fa2" and s["cuda_graph"] is False and s["path"] == "tensor-core"
        host = s["truth"]["event"] in ("host-sleep", "host-cpu")
        assert (s["truth"]["ms"] is not None) == host
    joins = [e for e in doc["run"]["events"] if e["event"] == "long-join"]
    assert [e["role"] for e in joins] == ["onset", None] and joins[1]["tokens"] == 131072
    # The collector's planner, given the run's recorded configuration and seed, makes the schedule the capture ran:
    # every measured step's batch (query rows, KV lengths) and event, as the GPU run wrote them.
    run = doc["run"]
    cfg = LoopConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in run["loop"].items()})
    plan = plan_loop(cfg, run["steps"], run["warmup"], run["seed"], run["shape"]["page_size"])
    planned = [(list(x.qo_lens), list(x.kv_lens), x.event) for x in plan.steps if x.measured is not None]
    assert planned == [(s["qo_lens"], s["kv_lens"], s["truth"]["event"]) for s in steps]


@pytest.mark.parametrize("stem", sorted(CAPTURES))
def test_loop_captures_kernels_per_step(stem: str) -> None:
    _, pairs = _capture(stem)
    _, path, graph, _ = CAPTURES[stem]
    for s, r in pairs:
        names = [n for n, _, _ in r.kernels]
        attention = [n for n in names if "PrefillWithPagedKVCache" in n or "DecodeWithPagedKVCache" in n]
        assert len(attention) == 4, s["key"]  # one per layer, whatever the step
        assert not any("MergeStates" in n for n in names)  # split-KV is off everywhere
        if s["phase"] != "decode":  # prefill and mixed steps: FA2's causal prefill kernel
            assert all("BatchPrefillWithPagedKVCacheKernel" in n and "MaskMode)1" in n for n in attention)
        elif path == "cuda-core":
            assert all("BatchDecodeWithPagedKVCacheKernel" in n for n in attention)
        else:  # the tensor-core decode path runs FA2's prefill kernel without a mask
            assert all("BatchPrefillWithPagedKVCacheKernel" in n and "MaskMode)0" in n for n in attention)
        # 64 kernels a decode step (the FA2 loop: 68 at the batch sizes where cuBLAS splits 4 more GEMMs along K);
        # prefill / mixed steps: 65 (the sampled rows' gather before the LM head)
        assert len(names) in ((64, 68) if s["phase"] == "decode" else (65,)), s["key"]


@pytest.mark.parametrize("stem", sorted(CAPTURES))
def test_loop_captures_slow_steps_are_the_injected_ones(stem: str) -> None:
    _, pairs = _capture(stem)
    clean = [r.wall_ms for s, r in pairs if not s["truth"]["event"] and s["step"] < 176]
    normal = sorted(clean)[len(clean) // 2]
    for i, (s, r) in enumerate(pairs):
        event = s["truth"]["event"]
        before = [p[1] for p in pairs[max(0, i - 20):i] if not p[0]["truth"]["event"]]
        wall = sorted(b.wall_ms for b in before)[len(before) // 2] if before else normal
        attn = sorted(b.attn_ms for b in before)[len(before) // 2] if before else 0
        if event in ("host-sleep", "host-cpu"):
            assert r.wall_ms > 1.7 * wall and r.wall_ms - wall > 0.9 * s["truth"]["ms"], s["key"]
            assert r.attn_ms < 1.2 * attn  # the GPU did not do more
        elif event == "prefill":
            assert r.wall_ms > 4 * wall and r.gpu_ms > 10 * r.attn_ms / 2, s["key"]
        elif event == "chunked-prefill":
            assert r.wall_ms > 1.7 * wall, s["key"]
        elif event == "long-join" and s["truth"]["tokens"] == 131072:
            assert r.attn_ms > 3 * attn and r.wall_ms > 1.2 * wall, s["key"]
        elif event == "long-join":  # the onset: attention several times slower, the step well under 2x
            assert r.attn_ms > 2.2 * attn and r.wall_ms < 1.8 * wall, s["key"]
        elif s["step"] < 176:  # no event before the joins: within the normal range
            assert r.wall_ms < 1.5 * normal, s["key"]


def test_loop_torch_steps_are_profiler_steps_covering_the_host_work() -> None:
    events = json.loads(gzip.decompress((LOOP / "loop_fa2_torch.pt.trace.json.gz").read_bytes()))["traceEvents"]
    ranges = sorted((e for e in events if e.get("cat") == "user_annotation"), key=lambda e: e["ts"])
    assert [e["name"] for e in ranges] == [f"ProfilerStep#{i}" for i in range(2, 242)]  # no other annotations
    gaps = [b["ts"] - a["ts"] - a["dur"] for a, b in zip(ranges, ranges[1:], strict=False)]
    assert 0 <= min(gaps) and max(gaps) < 200  # microseconds: one range ends where the next starts
    d2h = {e["args"]["correlation"] for e in events if e.get("cat") == "gpu_memcpy" and "DtoH" in e["name"]}
    launches = sorted((e["ts"], e["args"]["correlation"]) for e in events if e.get("cat") == "cuda_runtime")
    stamps = [t for t, _ in launches]
    for r in ranges:  # each range holds its step's single device-to-host copy: the sampled ids' .tolist()
        lo, hi = bisect.bisect_left(stamps, r["ts"]), bisect.bisect_right(stamps, r["ts"] + r["dur"])
        assert sum(c in d2h for _, c in launches[lo:hi]) == 1, r["name"]
    mm = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::mm" and
          e["args"].get("Input Dims") == [[512, 512], [512, 512]]]
    doc, _ = _capture("loop_fa2_torch")  # the host-cpu stalls' products, with their shapes (record_shapes=True)
    assert len(mm) == sum(e.get("cpu_mm", 0) for e in doc["run"]["events"]) == 4
