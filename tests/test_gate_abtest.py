"""Issue 29's "done when", on the A/A and A/B captures of examples/abtest (collectors/abtest.py, one decode loop on
an H200; abtest.truth.json says what each pair must show; the README's tables were measured with
examples/abtest/kernel_totals.py and examples/loop/step_times.py, not with the gate):

- A/A (aa1 -> aa2, aa2 -> aa3, aa1 -> aa3): every group unchanged, exit 0 under --fail-on-regression 5%; the step
  wall time differs by up to 57 % between these processes (the README: 2.73 / 3.55 / 4.29 ms) while the kernels
  agree within 0.1 %, so step groups are gated on GPU time by default and the wall change is said, not gated.
- Kineto vs Nsight Systems (aa1 -> aa_nsys): every kernel paired (e.g. 80 launches of the 64x32 GEMM in aa1,
  counted with json.load), all unchanged, exit 0; the steps (ProfilerStep#N vs `step id=N`) do not pair.
- A/B: split-KV forced off -> the FA2 decode kernel regressed (the README: 7.93 -> 33.62 ms over the steps) with
  split-KV named at B = 25 and B_th = 33 (FA2, H_kv 8: README); use_tensor_cores flipped -> a path change
  tensor-core -> CUDA-core in the step group and the attention kernel group; MLP +25 % -> GEMM groups regressed and
  the step's growth attributed to gemm; MLP +3.1 % -> below the 5 % gate, stated with its interval, and found at
  1 % once the A/A noise is calibrated (leave-one-out: no A/A pair fires at 1 % with the other two as noise).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from traceinsight.cli import main

REPO = Path(__file__).resolve().parents[1]
AB = REPO / "examples" / "abtest"
TRUTH = json.loads((AB / "abtest.truth.json").read_text())
RUNS = {r["name"]: r for r in TRUTH["runs"]}


def _diff(before: str, after: str, *opts: str, code: int | None = None) -> tuple[int, dict[str, Any]]:
    rb, ra = RUNS[before], RUNS[after]
    r = CliRunner().invoke(main, ["diff", str(AB / rb["trace"]), str(AB / ra["trace"]),
                                  "--meta-before", str(AB / rb["sidecar"]), "--meta-after", str(AB / ra["sidecar"]),
                                  "--format", "json", *opts])
    assert r.exit_code in (0, 3), r.output
    if code is not None:
        assert r.exit_code == code, r.stdout[:3000]
    return r.exit_code, json.loads(r.stdout)


def _group(d: dict[str, Any], prefix: str) -> dict[str, Any]:
    g = d["gate"]
    (row,) = [x for x in g["step_groups"] + g["kernel_groups"] if x["group"].startswith(prefix)]
    return row


AA_PAIRS = [(p["before"], p["after"]) for p in TRUTH["pairs"] if p["kind"] == "A/A"]


@pytest.fixture(scope="module")
def aa_diffs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """Each A/A pair's diff, written as `diff --format json` writes it (the calibration input)."""
    out = tmp_path_factory.mktemp("aa")
    files = {}
    for b, a in AA_PAIRS:
        _, d = _diff(b, a, "--fail-on-regression", "5%", code=0)
        files[(b, a)] = out / f"{b}_{a}.json"
        files[(b, a)].write_text(json.dumps(d))
    return files


FLASHINFER_AA = [p for p in AA_PAIRS if not p[0].startswith("fa3")]  # the truth's FlashInfer A/A pairs


def test_aa_pairs_are_unchanged_in_every_group(aa_diffs: dict[tuple[str, str], Path]) -> None:
    for pair, path in aa_diffs.items():
        g = json.loads(path.read_text())["gate"]
        paired = [x for x in g["step_groups"] + g["kernel_groups"] if x["metrics"]]
        assert {x["verdict"] for x in paired} == {"unchanged"}, pair
        assert all(x["status"] == "paired" for x in g["step_groups"] + g["kernel_groups"]), pair
        if pair[0].startswith("fa3"):
            # 2 distributions x 2 batch sizes of steps; FA3's kernel (two template instances: 40 launches in
            # fa3_aa1, counted with json.load), its combine (30 launches) and two prepare kernels (20 each)
            assert len(g["step_groups"]) == 4, pair
            counts = sorted((x["family"], x["n_before"]) for x in g["kernel_groups"])
            attn = [n for f, n in counts if f == "attention"]
            assert sum(attn) == 40 and len(attn) == 2, pair
            assert [c for c in counts if c[0] != "attention"] == [("merge", 30), ("prepare", 20), ("prepare", 20)]
            continue
        assert len(paired) == 9, pair  # the decode steps, 7 GEMM kinds and the FA2 decode kernel, the merge
        (steps,) = g["step_groups"]
        assert steps["n_before"] == steps["n_after"] == 40
        assert abs(steps["metrics"]["median"]["change"]) < 0.01  # GPU time per step: within 1 %
    wall = json.loads(aa_diffs[("aa1", "aa3")].read_text())["gate"]["step_groups"][0]["other_metrics"]["median"]
    assert wall["change"] > 0.5  # the README: 2.73 -> 4.29 ms (+57 %) of host-bound wall time


def test_kineto_vs_nsys_pairs_every_kernel_and_passes() -> None:
    _, d = _diff("aa1", "aa_nsys", "--fail-on-regression", "5%", code=0)
    g = d["gate"]
    assert {x["status"] for x in g["kernel_groups"]} == {"paired"} and len(g["kernel_groups"]) == 8
    assert {x["verdict"] for x in g["kernel_groups"]} == {"unchanged"}
    gemm = _group(d, "gemm nvjet_sm90_tst_64x32_64x16_2x1_v_bz_TNT")
    assert gemm["n_before"] == gemm["n_after"] == 80
    assert {x["status"] for x in g["step_groups"]} == {"new", "gone"}


def test_split_kv_forced_off_regresses_attention_with_its_cause() -> None:
    _, d = _diff("aa1", "ab_split_off", "--fail-on-regression", "5%", code=3)
    attn = _group(d, "attention BatchPrefillWithPagedKVCacheKernel decode")
    assert attn["verdict"] == "regressed" and attn["metrics"]["median"]["ci_low"] > 2.0  # more than 3x slower
    (cause,) = attn["causes"]
    assert cause["kind"] == "split-kv-off" and "at B >= 25 (B_th = 33)" in cause["text"]
    assert "80 of 80 attention launches" in cause["text"] and cause["per_step_ns"] > 300_000
    steps = d["gate"]["step_groups"][0]
    assert steps["verdict"] == "regressed" and [c["kind"] for c in steps["causes"]] == ["split-kv-off", "component"]
    assert steps["causes"][1]["component"] == "attention"
    merge = [x for x in d["gate"]["kernel_groups"] if x["family"] == "merge"]
    assert [(x["status"], x["n_before"]) for x in merge] == [("gone", 80)]  # no merge kernel without split-KV


def test_tensor_cores_flipped_is_a_path_change_in_steps_and_attention() -> None:
    _, d = _diff("aa1", "ab_cuda_core", "--fail-on-regression", "5%", code=3)
    steps = d["gate"]["step_groups"][0]
    assert steps["status"] == "path-change" and steps["verdict"] == "regressed"
    assert steps["causes"][0]["text"] == ("attention path flashinfer-fa2 (tensor-core) -> flashinfer-cuda-core "
                                          "(CUDA-core)")
    attn = _group(d, "attention BatchDecodeWithPagedKVCacheKernel decode")
    assert attn["status"] == "path-change" and attn["verdict"] == "regressed" and attn["n_before"] == 80
    assert "(was BatchPrefillWithPagedKVCacheKernel [flashinfer-fa2])" in attn["group"]


def test_a_25_percent_wider_mlp_regresses_gemm_groups() -> None:
    _, d = _diff("aa1", "ab_mlp125", "--fail-on-regression", "5%", code=3)
    g = d["gate"]
    regressed = [x for x in g["kernel_groups"] if x["verdict"] == "regressed"]
    assert regressed and {x["family"] for x in regressed} == {"gemm"}
    assert _group(d, "attention")["verdict"] == "unchanged"
    steps = g["step_groups"][0]
    assert steps["verdict"] == "regressed"
    assert [c["component"] for c in steps["causes"] if c["kind"] == "component"] == ["gemm"]


def test_a_3_percent_wider_mlp_is_stated_below_the_gate_then_found_with_calibrated_noise(
        aa_diffs: dict[tuple[str, str], Path]) -> None:
    _, d = _diff("aa1", "ab_mlp103", "--fail-on-regression", "5%", code=0)
    gemm = _group(d, "gemm nvjet_sm90_tst_384x32_64x4_4x1_v_bz_TNT")  # the MLP's gate_up GEMM
    med = gemm["metrics"]["median"]
    assert gemm["verdict"] == "unchanged" and med["detected"] and 0 < med["ci_low"] < med["change"] < 0.05
    assert any(line.startswith(f"below the gate: {gemm['group']}: median +") for line in d["gate"]["summary"])
    noise = [opt for pair, path in aa_diffs.items() if pair in FLASHINFER_AA for opt in ("--noise", str(path))]
    _, c = _diff("aa1", "ab_mlp103", "--fail-on-regression", "1%", *noise, code=3)
    assert c["gate"]["regressed"] == [gemm["group"]]
    p90 = _group(c, gemm["group"])["metrics"]["p90"]
    assert p90["run_to_run"] < 0.01 and p90["ci_low"] > p90["threshold"]  # the A/A floor of this GEMM is < 1 %


def test_fa3_num_splits_1_regresses_the_skewed_steps_with_split_kv_named() -> None:
    """FA3 varlen decode, num_splits 0 (its heuristic) -> 1: the README's kernel time per step, skew80: 315 -> 2337
    us (bs 256) and 476 -> 2349 us (bs 960); uniform: 298 -> 290 and 424 -> 423 us. The step names differ only in
    `splits=0` / `splits=1`, so the steps pair by kind."""
    _, d = _diff("fa3_aa1", "fa3_ab_splits1", "--fail-on-regression", "5%", code=3)
    steps = {(x["kind"]["name"].split("dist=")[1].split()[0], x["kind"]["batch_bucket"]): x
             for x in d["gate"]["step_groups"]}
    assert {x["status"] for x in steps.values()} == {"paired"} and len(steps) == 4
    for bucket in ("256-511", "512-1023"):
        skew = steps[("skew", bucket)]
        assert skew["verdict"] == "regressed" and skew["metrics"]["median"]["ci_low"] > 2.0
        split = next(c for c in skew["causes"] if c["kind"] == "split-kv-off")
        assert "10 of 10 attention launches without it (before 0 of 10)" in split["text"]
        assert steps[("uniform", bucket)]["verdict"] == "unchanged"
    combine = [x for x in d["gate"]["kernel_groups"] if x["kernel"] == "FlashAttnFwdCombine"]
    assert [x["status"] for x in combine] == ["gone"]  # no split, nothing to combine


def test_aa_pairs_stay_unchanged_at_1_percent_with_the_other_pairs_as_noise(
        aa_diffs: dict[tuple[str, str], Path]) -> None:
    assert len(FLASHINFER_AA) == 3  # each pair judged against the other two as its noise
    for pair in FLASHINFER_AA:
        noise = [opt for other, path in aa_diffs.items() if other != pair and other in FLASHINFER_AA
                 for opt in ("--noise", str(path))]
        _diff(*pair, "--fail-on-regression", "1%", *noise, code=0)
