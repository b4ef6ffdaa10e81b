"""PyTorch SDPA decode through every backend on the H200 (examples/sdpa, issue 27): every decode attention kernel
and every reduction of it is labelled attention or merge, never "other"; each reduction is the merge of the launch
it follows, and the split state of each launch comes from it.

Truth (examples/sdpa/README.md, from the trace's own kernels per ProfilerStep): FlashAttention's SDPA backend runs
`flash_fwd_splitkv_kernel` + `flash_fwd_splitkv_combine_kernel` for gqa-padded skew8 / pair2 and mha-padded pair2,
`flash_fwd_kernel` alone otherwise; cuDNN runs `cudnn::fusion::lean_reduction_kernel` after its attention kernel
for skew8 and pair2 with GQA heads and for pair2 with expanded heads (grid.x = 8, 32 and 4 KV splits), nothing
after it for uniform64 or for skew8 with expanded heads (grid.x = 1); the mem-efficient kernel has no reduction.
Each step's sidecar entry names its backend, layout and case."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from traceinsight.pipeline import analyze

SDPA = Path(__file__).resolve().parents[1] / "examples" / "sdpa"
TRACE = SDPA / "sdpa_q32kv4d128_torch.pt.trace.json.gz"
SIDECAR = SDPA / "sdpa_q32kv4d128_torch.sidecar.json.gz"
# (backend, layout, case) whose launches are followed by a reduction (examples/sdpa/README.md's table).
SPLIT = {("flash", "gqa-padded", "skew8"), ("flash", "gqa-padded", "pair2"), ("flash", "mha-padded", "pair2"),
         ("cudnn", "gqa-padded", "skew8"), ("cudnn", "gqa-padded", "pair2"), ("cudnn", "gqa-masked", "skew8"),
         ("cudnn", "gqa-masked", "pair2"), ("cudnn", "mha-padded", "pair2"), ("cudnn", "mha-masked", "pair2")}
REDUCTION = {"flash": "flash_fwd_splitkv_combine_kernel", "cudnn": "lean_reduction_kernel"}


@pytest.fixture(scope="module")
def analysis() -> Any:
    _, (a,) = analyze([TRACE], meta=[SIDECAR], cache=False)
    return a


def _truth() -> dict[str, dict[str, Any]]:
    return {s["key"]: s["sdpa"] for s in json.loads(gzip.decompress(SIDECAR.read_bytes()))["steps"]}


def test_no_sdpa_decode_kernel_or_reduction_is_other(analysis: Any) -> None:
    fused = re.compile(r"sdpa|flash_fwd|fmha_cutlass|lean_reduction")
    kernels = [k for k in analysis.kernels if fused.search(k["name"])]
    assert {(k["family"], k["backend"]) for k in kernels} == {
        ("attention", "pytorch-flash"), ("merge", "pytorch-flash"), ("attention", "pytorch-mem-efficient"),
        ("attention", "cudnn"), ("merge", "cudnn")}
    count: dict[tuple[str, str], int] = {}
    for k in kernels:  # one row per full name (template variants)
        count[(k["kernel"], k["family"])] = count.get((k["kernel"], k["family"]), 0) + k["count"]
    assert count[("lean_reduction_kernel", "merge")] == 18
    assert count[("flash_fwd_splitkv_combine_kernel", "merge")] == 9
    assert not [k for k in analysis.kernels if k["family"] == "other" and k["backend"] == "cudnn"]


def test_each_reduction_is_its_launchs_merge_and_gives_its_split_state(analysis: Any) -> None:
    truth = _truth()
    seen = {"flash": 0, "cudnn": 0, "efficient": 0}
    for st in analysis.steps:
        sdpa = truth[st.name]
        (launch,) = st.launches  # one SDPA call per step
        assert launch.phase == "decode", (st.name, launch.phase_evidence)
        backend = sdpa["backend"]
        seen[backend] += 1
        split = (backend, sdpa["layout"], sdpa["case"]) in SPLIT
        if backend == "efficient":
            assert not launch.merges and launch.split_kv is None  # no reduction kernel: not visible in the trace
            continue
        assert [m.kernel for m in launch.merges] == ([REDUCTION[backend]] if split else []), st.name
        assert launch.split_kv is split, (st.name, launch.split_evidence)
        if backend == "cudnn":
            gx = launch.attention.grid[0]
            assert (gx > 1) is split
            if split:
                assert f"grid.x = {gx} KV splits" in (launch.split_evidence or "")
    # Every flash, mem-efficient and cuDNN step of the capture (the math path runs no attention kernel).
    assert seen == {"flash": 18, "efficient": 18, "cudnn": 36}
