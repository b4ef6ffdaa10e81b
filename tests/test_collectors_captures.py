"""The captures of issues 27 and 29: the SDPA decode collector's plan, the loop's gemm-burst / split-KV /
prefill-backend options, the A/A + A/B driver's plan and truth, and the H200 captures made with them
(examples/sdpa, examples/mixed, examples/gemm_burst, examples/abtest)."""

from __future__ import annotations

import collections
import functools
import gzip
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from collectors import abtest
from collectors.cli import build_config, collect
from collectors.config import LoopConfig, RunConfig
from collectors.loop_plan import GEMM_EVENT, parse_events, plan_loop
from collectors.sdpa_plan import BACKENDS, CASES, LAYOUTS, LEAD_STEPS, Case, attended, plan_steps, scaled
from traceinsight.ingest import sidecar as reader

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


# ---------------------------------------------------------------------------------------------- SDPA plan
def test_sdpa_steps_are_consecutive_profiler_steps_per_backend_layout_and_case() -> None:
    runs = [("flash", "gqa-padded"), ("cudnn", "mha-masked")]
    steps = plan_steps(runs, CASES, 3)
    assert len(steps) == 2 * len(CASES) * 3
    assert [s.key for s in steps] == [f"ProfilerStep#{LEAD_STEPS + i}" for i in range(len(steps))]
    assert [(s.backend, s.layout, s.case.name, s.repeat) for s in steps[:4]] == [
        ("flash", "gqa-padded", "skew8", 0), ("flash", "gqa-padded", "skew8", 1),
        ("flash", "gqa-padded", "skew8", 2), ("flash", "gqa-padded", "pair2", 0)]
    assert steps[-1].range_name == "sdpa backend=cudnn layout=mha-masked case=uniform64 bs=64 step=2"
    assert len({s.range_name for s in steps}) == len(steps)


def test_sdpa_attended_lengths_follow_the_layout() -> None:
    case = Case("x", (10, 300, 20))
    assert attended(case, "gqa-masked") == [10, 300, 20] == attended(case, "mha-masked")
    assert attended(case, "gqa-padded") == [300, 300, 300] == attended(case, "mha-padded")
    assert scaled((case,), 16) == (Case("x", (1, 18, 1)),)
    skew = next(c for c in CASES if c.name == "skew8")
    assert skew.batch_size == 8 and skew.max_len == 32768 and sorted(skew.kv_lens)[-2] == 4096


@pytest.mark.parametrize(("runs", "repeats", "message"), [
    ([("flash2", "gqa-padded")], 1, "unknown SDPA backend 'flash2'"),
    ([("flash", "gqa")], 1, "unknown layout 'gqa'"),
    ([("flash", "gqa-padded")], 0, "--steps must be at least 1, got 0"),
])
def test_sdpa_plan_errors(runs: list[tuple[str, str]], repeats: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_steps(runs, CASES, repeats)


def test_sdpa_collector_without_torch_is_one_line_exit_2_and_needs_no_gpu_stack_to_import() -> None:
    bad = subprocess.run([sys.executable, "-m", "collectors.sdpa", "--out", "/nonexistent", "--backends", "nope"],
                         capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and bad.stderr == ("traceinsight: error: unknown backend 'nope' (choose from flash, "
                                                  "efficient, cudnn, math)\n")
    code = "import sys, collectors.sdpa, collectors.abtest; print(sorted(m for m in ('torch',) if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("args", "message"), [
    (["sdpa"], "the SDPA collector needs torch (with CUDA) and an NVIDIA GPU"),
    (["sdpa", "--steps", "0"], "--steps must be at least 1, got 0"),
    (["abtest"], "collecting needs the [collect] extra"),
    (["abtest", "--only", "aa1,nope"], "--only: unknown run 'nope' (choose from flashinfer, fa3, aa1, aa2, "),
])
def test_collect_sdpa_and_abtest_errors_are_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "traceinsight", "collect", *args, "--out", str(out)],
                         capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 2 and res.stdout == "", res
    assert res.stderr.count("\n") == 1 and res.stderr.startswith(f"traceinsight: error: {message}"), res.stderr
    assert not out.exists()


# ---------------------------------------------------------------------------------------------- loop options
def test_gemm_burst_marks_its_consecutive_decode_steps() -> None:
    cfg = LoopConfig(batch=8, prompt_len=(10, 20), events="long-join@0:4096,gemm-burst@5:3,gemm-burst@12")
    plan = plan_loop(cfg, 20, 3, 0, 16)
    burst = [e for e in plan.events if e.kind == GEMM_EVENT]
    assert [(e.step, e.span, e.tokens) for e in burst] == [(5, 3, None), (12, cfg.gemm_steps, None)]
    marked = [s.measured for s in plan.measured if s.event == GEMM_EVENT]
    assert marked == [5, 6, 7, 12, 13, 14, 15]
    assert all(s.phase == "decode" and s.batch_size == 9 for s in plan.measured if s.event == GEMM_EVENT)
    assert parse_events("gemm-burst@4:2") == [("gemm-burst", 4, 2)]
    with pytest.raises(ValueError, match="the step count must be at least 1"):
        parse_events("gemm-burst@4:0")
    with pytest.raises(ValueError, match="events overlap: host-sleep at measured step 6"):
        plan_loop(LoopConfig(events="gemm-burst@5:3,host-sleep@6"), 20, 3, 0, 16)


def _loop_args(*extra: str) -> list[str]:
    return ["loop", "--out", "o", "--qo-heads", "64", "--kv-heads", "8", "--steps", "30", "--warmup", "4",
            "--scenario", "none", *extra]


@pytest.mark.parametrize(("extra", "message"), [
    (("--split-kv", "off", "--paths", "cuda-core"), "--split-kv off needs --paths tc-fa2"),
    (("--events", "gemm-burst@3:2", "--cuda-graph"), "gemm-burst events run eager only"),
    (("--gemm-factor", "1"), "--gemm-factor must be a finite number above 1, got 1.0"),
    (("--gemm-steps", "0"), "--gemm-steps must be at least 1, got 0"),
    (("--prefill-backend", "fa4"), "Invalid value for '--prefill-backend'"),
])
def test_loop_new_option_errors_are_one_line_exit_2(extra: tuple[str, ...], message: str) -> None:
    res = CliRunner().invoke(collect, _loop_args(*extra))
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert res.output.startswith("traceinsight: error: collect: ") and message in res.output


def _config(args: list[str]) -> RunConfig:
    """The RunConfig the CLI builds from `args` (click parses them; nothing runs)."""
    ctx = collect.make_context("collect", list(args))
    params = dict(ctx.params)
    return build_config(params.pop("kind"), params.pop("out"), **params)


def test_loop_new_options_reach_the_config_and_survive_json() -> None:
    cfg = _config(_loop_args("--paths", "tc-auto", "--prefill-backend", "fa3", "--split-kv", "auto",
                             "--events", "gemm-burst@3:2,chunked-prefill@8:3000", "--gemm-factor", "1.75"))
    assert cfg.paths == ("tc-auto",) and cfg.loop.prefill_backend == "fa3" and cfg.loop.gemm_factor == 1.75
    assert RunConfig.from_json(cfg.to_json()) == cfg
    off = _config(_loop_args("--split-kv", "off"))
    assert off.loop.split_kv == "off" and off.paths == ("tc-fa2",)


# ---------------------------------------------------------------------------------------------- A/A + A/B plan
def test_every_abtest_command_is_a_valid_collect_command() -> None:
    for run in abtest.RUNS:
        for tiny in (False, True):
            cfg = _config(run.command("out", tiny))
            assert cfg.name == run.name and cfg.profiler == run.profiler and cfg.backend == run.backend
            if run.backend == "fa3":
                assert cfg.kind == "sweep" and cfg.steps == (2 if tiny else 10) and cfg.dists == ("skew80", "uniform")
                assert cfg.fa3.num_splits == ((1,) if run.name == "fa3_ab_splits1" else (0,))
            else:
                assert cfg.kind == "loop" and cfg.steps == (8 if tiny else 40) and cfg.loop.layers == abtest.LAYERS
    base = _config(abtest.Run("aa1").command("out", False))
    changed = {r.name: _config(r.command("out", False)) for r in abtest.RUNS}
    assert changed["ab_split_off"].loop.split_kv == "off" and changed["ab_cuda_core"].paths == ("cuda-core",)
    assert changed["ab_mlp125"].loop.mlp_width(abtest.HIDDEN) == 25600
    assert changed["ab_mlp103"].loop.mlp_width(abtest.HIDDEN) == 21120
    assert base.loop.mlp_width(abtest.HIDDEN) == abtest.MLP
    for name in ("aa2", "aa3", "aa_nsys"):  # the same workload: only the name (and the profiler) differ
        assert changed[name].loop == base.loop and changed[name].shape == base.shape


def test_abtest_truth_names_every_pair_and_the_group_each_change_moves() -> None:
    doc = abtest.truth(abtest.RUNS, tiny=False)
    pairs = {(p["before"], p["after"]): p for p in doc["pairs"]}
    assert [k for k, p in pairs.items() if p["kind"] == "A/A"] == [("aa1", "aa2"), ("aa2", "aa3"), ("aa1", "aa3"),
                                                                  ("fa3_aa1", "fa3_aa2")]
    assert pairs[("aa1", "aa_nsys")]["kind"] == "kineto-vs-nsys" and pairs[("aa1", "aa_nsys")]["compare"] == \
        "kernels only"
    assert {k[1]: (p["group"], p["expect"]) for k, p in pairs.items() if p["kind"] == "A/B"} == {
        "ab_split_off": ("attention", "regressed"), "ab_cuda_core": ("attention", "changed"),
        "ab_mlp125": ("gemm", "regressed"), "ab_mlp103": ("gemm", "regressed"),
        "fa3_ab_splits1": ("attention", "regressed")}
    assert pairs[("fa3_aa1", "fa3_ab_splits1")]["steps_expected_to_change"] == "dist=skew80"
    assert pairs[("aa1", "ab_mlp103")]["mlp_width_change"] == 0.0312
    assert [r["trace"] for r in doc["runs"]][3:5] == ["aa_nsys.sqlite", "ab_split_off.pt.trace.json.gz"]
    with pytest.raises(ValueError, match="unknown run 'aa9'"):
        abtest.select("aa1,aa9")
    assert [r.name for r in abtest.select("aa2, ab_mlp103")] == ["aa2", "ab_mlp103"]
    assert {r.backend for r in abtest.select("")} == {"flashinfer"}  # FA3's runs need --only (another wheel)
    assert [r.name for r in abtest.select("fa3")] == ["fa3_aa1", "fa3_aa2", "fa3_ab_splits1"]


# ---------------------------------------------------------------------------------------------- the H200 captures
@functools.cache
def _step_times() -> Any:
    spec = importlib.util.spec_from_file_location("loop_step_times", EXAMPLES / "loop" / "step_times.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _sidecar(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    reader.validate(doc, path)
    return doc


@functools.cache
def _capture(folder: str, stem: str, suffix: str = ".pt.trace.json.gz") -> tuple[dict[str, Any], list[Any]]:
    """(sidecar, [(sidecar step, trace step)]) of a capture; every sidecar key names exactly one range."""
    doc = _sidecar(EXAMPLES / folder / f"{stem}.sidecar.json.gz")
    st = _step_times()
    trace = EXAMPLES / folder / f"{stem}{suffix}"
    ranges = st.nsys_steps(trace) if suffix == ".sqlite" else st.kineto_steps(trace)
    pairs = []
    for s in doc["steps"]:
        hit = [r for r in ranges if reader.key_matches(s["key"], r.name)]
        assert len(hit) == 1, s["key"]
        pairs.append((s, hit[0]))
    assert len(ranges) == len(doc["steps"])
    return doc, pairs


def test_sdpa_capture_runs_every_backend_with_its_own_kernels() -> None:
    doc, pairs = _capture("sdpa", "sdpa_q32kv4d128_torch")
    assert {s["backend"] for s, _ in pairs} == {f"torch-sdpa-{b}" for b in BACKENDS}
    refused = {k for k, v in doc["run"]["probe"].items() if not v["runs"]}
    assert refused == {"flash/gqa-masked", "flash/mha-masked", "efficient/gqa-padded", "efficient/gqa-masked"}
    assert all(v["max_rel_err_vs_fp32"] < 5e-3 for v in doc["run"]["probe"].values() if v["runs"])
    seen: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for s, r in pairs:
        d = s["sdpa"]
        assert d["layout"] in LAYOUTS and len(s["kv_lens"]) == s["batch_size"] == len(d["kv_lens_requested"])
        assert s["kv_lens"] == (d["kv_lens_requested"] if d["mask"] else [d["padded_to"]] * s["batch_size"])
        names = [n for n, _, _ in r.kernels]
        fused = [n for n in names if "flash_fwd" in n or "fmha_cutlassF" in n or "cudnn_generated" in n]
        assert len(fused) == (0 if d["backend"] == "math" else 1 + any("splitkv_kernel" in n for n in fused)), names
        for n in names:
            seen[d["backend"]][n.split("<")[0].split("(")[0].removeprefix("void ")] += 1
    assert seen["flash"]["pytorch_flash::flash_fwd_splitkv_combine_kernel"] == 9  # skew8 (GQA) and pair2 (both)
    assert seen["flash"]["pytorch_flash::flash_fwd_kernel"] == 9
    assert seen["cudnn"]["cudnn::fusion::lean_reduction_kernel"] >= 6  # after the attention kernel, pair2 and skew8
    assert set(seen["efficient"]) >= {"fmha_cutlassF_bf16_aligned_64x128_rf_sm80"}
    assert not any("flash" in n or "fmha" in n or "cudnn" in n for n in seen["math"])


@pytest.mark.parametrize(("stem", "backend", "kernel"), [
    ("mixed_fa2_torch", "flashinfer-fa2", "BatchPrefillWithPagedKVCacheKernel"),
    ("mixed_sm90_torch", "flashinfer-sm90", "PrefillWithKVCacheKernel"),
])
def test_mixed_captures_serve_prefill_and_decode_rows_in_one_launch(stem: str, backend: str, kernel: str) -> None:
    doc, pairs = _capture("mixed", stem)
    assert doc["run"]["prefill_backend"] == ("fa2" if backend.endswith("fa2") else "fa3")
    mixed = [(s, r) for s, r in pairs if s["phase"] == "mixed"]
    assert [s["step"] for s, _ in mixed] == [6, 7, 8, 16, 17, 18, 19, 20, 21, 30, 31]
    assert [s["qo_lens"][-1] for s, _ in mixed] == [1024, 1024, 952, 1024, 1024, 1024, 1024, 1024, 880, 1024, 476]
    for s, r in pairs:
        assert s["backend"] == backend and s["path"] == "tensor-core"
        rows = s["qo_lens"]
        if s["phase"] == "mixed":
            assert set(rows[:-1]) == {1} and rows[-1] > 1 and len(rows) >= 33
        else:
            assert s["phase"] == "decode" and set(rows) == {1}
        attention = [n for n, _, _ in r.kernels if kernel in n]
        assert len(attention) == 2, s["key"]  # one launch per layer serves every row of the step


def test_gemm_burst_steps_are_about_1_6x_with_only_their_gemms_grown() -> None:
    doc, pairs = _capture("gemm_burst", "burst_fa2_torch")
    burst = [e for e in doc["run"]["events"] if e["event"] == GEMM_EVENT]
    assert [(e["step"], e["span"], e["component"]) for e in burst] == [(20, 4, "gemm"), (36, 2, "gemm")]
    plain = sorted(r.wall_ms for s, r in pairs if not s["truth"]["event"])
    plain_gpu = sorted(r.gpu_ms for s, r in pairs if not s["truth"]["event"])
    wall, gpu = plain[len(plain) // 2], plain_gpu[len(plain_gpu) // 2]
    attn = sorted(r.attn_ms for s, r in pairs)[len(pairs) // 2]
    for s, r in pairs:
        if s["truth"]["event"] == GEMM_EVENT:
            assert 1.45 < r.wall_ms / wall < 1.8, s["key"]
            assert r.gpu_ms - gpu > 0.8 * s["truth"]["extra_gemm_ms"]  # the extra GEMMs ran in the step
            assert abs(r.attn_ms - attn) < 0.1 * attn  # attention did not change
        else:
            assert r.wall_ms < 1.3 * wall, s["key"]


def test_abtest_captures_hold_the_same_kernels_and_their_one_change() -> None:
    truth = json.loads((EXAMPLES / "abtest" / "abtest.truth.json").read_text())
    assert all(r["rc"] == 0 for r in truth["runs"]) and len(truth["runs"]) == len(abtest.RUNS)

    def kernels(name: str, suffix: str = ".pt.trace.json.gz") -> list[list[str]]:
        _, pairs = _capture("abtest", name, suffix)
        return [sorted(n for n, _, _ in r.kernels) for _, r in pairs]

    base = kernels("aa1")
    assert len(base) == 40
    for name in ("aa2", "aa3"):
        assert kernels(name) == base
    def short(steps: list[list[str]]) -> list[list[str]]:  # Nsight Systems writes `<unnamed>`, `(bool)1`, ...
        return [sorted(re.split(r"[<(]", n.replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon")
                                .removeprefix("void "))[0] for n in k) for k in steps]

    assert short(kernels("aa_nsys", ".sqlite")) == short(base)  # Kineto and nsys saw the same launches, step by step
    assert kernels("ab_mlp125") != base  # wider GEMMs may pick other cuBLAS kernels; the counts stay
    assert [len(k) for k in kernels("ab_mlp125")] == [len(k) for k in base]
    splits = {r["name"]: {s["plan"]["split_kv"] for s, _ in _capture("abtest", r["name"],
                                                                    r["trace"].removeprefix(r["name"]))[1]}
              for r in truth["runs"] if not r["name"].startswith("fa3_")}
    assert splits.pop("ab_split_off") == {False} and all(v == {True} for v in splits.values())
    assert not any("MergeStates" in n for k in kernels("ab_split_off") for n in k)
    assert all(any("BatchDecodeWithPagedKVCacheKernel" in n for n in k) for k in kernels("ab_cuda_core"))


def _fa3_steps(name: str) -> dict[str, tuple[float, list[str]]]:
    """The FA3 sweep's steps (their `decode <key>` record_function ranges on the GPU track): key -> (kernel us,
    kernel names)."""
    events = json.loads(gzip.decompress((EXAMPLES / "abtest" / f"{name}.pt.trace.json.gz").read_bytes()))
    kernels = [e for e in events["traceEvents"] if e.get("cat") == "kernel"]
    out = {}
    for r in events["traceEvents"]:
        if r.get("cat") == "gpu_user_annotation" and r["name"].startswith("decode "):
            inside = [k for k in kernels if r["ts"] <= k["ts"] <= r["ts"] + r["dur"]]
            out[r["name"].removeprefix("decode ")] = (sum(k["dur"] for k in inside), [k["name"] for k in inside])
    return out


def test_fa3_abtest_num_splits_1_slows_the_skewed_steps_only() -> None:
    a1, a2, b = (_fa3_steps(n) for n in ("fa3_aa1", "fa3_aa2", "fa3_ab_splits1"))
    assert len(a1) == len(a2) == len(b) == 40
    for name in ("fa3_aa1", "fa3_aa2", "fa3_ab_splits1"):
        doc = _sidecar(EXAMPLES / "abtest" / f"{name}.sidecar.json.gz")
        assert {s["call"]["num_splits"] for s in doc["steps"]} == {1 if name.endswith("splits1") else 0}
    for key, (us, names) in a1.items():
        other = key.replace("splits=0", "splits=1")
        assert abs(a2[key][0] - us) < 0.05 * us, key  # A/A: within 5% step by step
        combine = [n for n in names if "FlashAttnFwdCombine" in n]
        assert not any("FlashAttnFwdCombine" in n for n in b[other][1])
        if "dist=skew80" in key:
            assert combine and b[other][0] > 3 * us, key  # split before, one CTA per KV head after
        else:
            assert abs(b[other][0] - us) < 0.1 * us, key
