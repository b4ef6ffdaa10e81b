"""Issue 2's acceptance: the split-KV state of every annotated step, decided from the trace alone, equals the
planner's own decision recorded in the ground-truth meta files (plan_info[-1]; the 9-element SM90 plan never
splits). The meta files are read here with plain json, independently of traceinsight's sidecar reader."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from traceinsight.pipeline import analyze

CASE = re.compile(r"tc=(\d)(?: backend=\w+)? dist=(\w+) bs=(\d+)")


def planner_split(plan_info: list[int]) -> bool:
    return False if len(plan_info) == 9 else bool(plan_info[-1])


def ground_truth(meta: Path) -> dict[tuple[int, str, int], bool]:
    opener = gzip.open if meta.suffix == ".gz" else open
    with opener(meta, "rt") as fh:
        doc = json.load(fh)
    cases = doc["cases"] if isinstance(doc, dict) else doc
    return {(c["tc"], c["dist"], c["B"]): planner_split(c["plan_info"]) for c in cases}


@pytest.mark.parametrize(
    ("trace", "meta", "steps_per_case"),
    [
        ("flashinfer_decode_sweep.pt.trace.json.gz", "flashinfer_decode_sweep.meta.json.gz", 3),
        ("flashinfer_fa2_decode_sweep.pt.trace.json.gz", "flashinfer_fa2_decode_sweep.meta.json.gz", 3),
        ("flashinfer_decode.sqlite", "flashinfer_decode.nsys.meta.json", None),
    ],
)
def test_split_kv_matches_planner_for_every_case(h200: Path, trace: str, meta: str, steps_per_case: int | None):
    truth = ground_truth(h200 / meta)
    _, (a,) = analyze([h200 / trace])
    seen: dict[tuple[int, str, int], int] = {}
    for step in a.steps:
        m = CASE.search(step.name)
        assert m, f"step {step.index} {step.name!r} is not an annotated case"
        key = (int(m[1]), m[2], int(m[3]))
        assert step.split_kv is truth[key], (step.name, step.split_kv, truth[key])
        seen[key] = seen.get(key, 0) + 1
    assert set(seen) == set(truth), "every case of the meta file appears as steps"
    if steps_per_case:
        assert set(seen.values()) == {steps_per_case}
    # Both states occur in every one of these captures (the planner's own plan_info), so the check is not vacuous.
    assert set(truth.values()) == {True, False}


def test_sweep_split_counts(h200: Path):
    # Independent count (python json over the meta file): the CUDA-core planner keeps split-KV off for uniform
    # batches from B = 192 (every request fits one chunk, so new_bs == B) and for every batch with B >= 297
    # (B * H_kv >= 1188); SM90 (tc=1) never splits.
    truth = ground_truth(h200 / "flashinfer_decode_sweep.meta.json.gz")
    skewed_off = sorted({b for (tc, d, b), s in truth.items() if tc == 0 and d != "uniform" and not s})
    assert {297, 320, 384, 512} <= set(skewed_off) and min(skewed_off) >= 296
    uniform_off = sorted({b for (tc, d, b), s in truth.items() if tc == 0 and d == "uniform" and not s})
    assert min(uniform_off) == 192
    _, (a,) = analyze([h200 / "flashinfer_decode_sweep.pt.trace.json.gz"])
    assert len(a.steps) == 390
    assert a.extra["unassigned_launches"]["count"] == 130  # one warm-up launch per case, outside every step
    off = [s for s in a.steps if s.split_kv is False]
    assert len(off) == 3 * sum(1 for v in truth.values() if not v)


def test_launch_fields_on_sweep(h200: Path):
    _, (a,) = analyze([h200 / "flashinfer_decode_sweep.pt.trace.json.gz"])
    first = a.steps[0]
    assert first.name == "decode tc=0 dist=uniform bs=8 step=0"
    (launch,) = first.launches
    # python json over the trace: the first kernel inside the gpu_user_annotation of this step is BatchDecode,
    # grid [296, 4, 1], dur 336.766 us, followed by a merge kernel (the first BatchDecode of the file, 336.927 us,
    # is an unannotated warm-up launch and belongs to no step).
    assert launch.attention.kernel == "BatchDecodeWithPagedKVCacheKernel"
    assert launch.attention.backend == "flashinfer-cuda-core"
    assert launch.attention.grid == (296, 4, 1)
    assert launch.attention.dur_ns == 336766
    assert launch.split_kv is True and len(launch.merges) == 1
    assert launch.phase == "decode"
    sm90 = next(s for s in a.steps if s.name.startswith("decode tc=1 dist=uniform bs=128"))
    (l90,) = sm90.launches
    assert l90.attention.backend == "flashinfer-sm90"
    assert l90.attention.grid == (132, 1, 1)
    assert l90.phase == "decode", "the SM90 prefill kernel runs decode here: the step says so"


def test_no_ranges_one_step_per_launch(foreign: Path):
    # The TraceLens H100 trace has pytorch_flash::flash_fwd_kernel launches; each becomes (or is part of) a step.
    _, (a,) = analyze([foreign / "tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"])
    backends = {x.attention.backend for s in a.steps for x in s.launches}
    assert "pytorch-flash" in backends
    assert all(s.launches for s in a.steps)
