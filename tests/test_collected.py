"""The analyzer against our own H200 collection (examples/collected, made with collectors/ — see its README):
split-KV state per step, thresholds and findings must match what the sidecar recorded from the planner itself.
The sidecars are read here with plain json/gzip, independently of traceinsight's sidecar reader."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import EXAMPLES

from traceinsight.pipeline import analyze
from traceinsight.report.saved import document_of

COLLECTED = EXAMPLES / "collected"

# trace, sidecar, expected B_th per backend from the README's arithmetic (occupancy x 132 SMs / H_kv)
CASES = [
    ("sweep_q32kv4d128_torch.pt.trace.json.gz", "sweep_q32kv4d128_torch.sidecar.json.gz",
     {"flashinfer-cuda-core": 297, "flashinfer-fa2": 66}),
    ("sweep_q64kv8d128_torch.pt.trace.json.gz", "sweep_q64kv8d128_torch.sidecar.json.gz",
     {"flashinfer-cuda-core": 148, "flashinfer-fa2": 33}),
    ("sweep_q32kv4d128_fp8_torch.pt.trace.json.gz", "sweep_q32kv4d128_fp8_torch.sidecar.json.gz",
     {"flashinfer-cuda-core": 231, "flashinfer-fa2": 66}),
    ("sweep_q64kv8d128_nsys.sqlite", "sweep_q64kv8d128_nsys.sidecar.json",
     {"flashinfer-cuda-core": 148, "flashinfer-fa2": 33}),
    ("serving_q64kv8d128_torch.pt.trace.json.gz", "serving_q64kv8d128_torch.sidecar.json.gz",
     {"flashinfer-cuda-core": 148}),
    ("serving_q64kv8d128_graph_torch.pt.trace.json.gz", "serving_q64kv8d128_graph_torch.sidecar.json.gz",
     {"flashinfer-cuda-core": 148}),
]


def sidecar_steps(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)["steps"]


def matching(key: str, name: str) -> bool:
    return set(key.split()) <= set(name.split())


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def collected(request):
    trace, sidecar, thresholds = request.param
    _, (a,) = analyze([COLLECTED / trace], meta=[COLLECTED / sidecar])
    return a, sidecar_steps(COLLECTED / sidecar), thresholds


def test_split_kv_of_every_step_equals_the_planners_decision(collected):
    a, steps, _ = collected
    by_key = {s["key"]: s for s in steps}
    checked = 0
    for step in a.steps:
        keys = [k for k in by_key if matching(k, step.name)]
        assert len(keys) == 1, (step.name, keys)
        planned = by_key[keys[0]]["plan"]["split_kv"]
        if by_key[keys[0]]["backend"] == "flashinfer-sm90":
            planned = False
        assert step.split_kv is planned, (step.name, step.split_kv, planned)
        checked += 1
    assert checked == len(steps), "every sidecar step is a step of the trace"


def test_thresholds_from_the_trace(collected):
    a, _, thresholds = collected
    got = {t["backend"]: t["b_threshold"] for t in document_of(a)["thresholds"]}
    for backend, b_th in thresholds.items():
        assert got.get(backend) == b_th, (backend, got)


def test_split_kv_off_findings_cover_exactly_the_unsplit_skewed_cuda_core_steps(collected):
    a, steps, thresholds = collected
    by_key = {s["key"]: s for s in steps}
    unsplit_long = set()
    for step in a.steps:
        (key,) = [k for k in by_key if matching(k, step.name)]
        s = by_key[key]
        if s["backend"] != "flashinfer-cuda-core" or s["plan"]["split_kv"]:
            continue
        lens = s["kv_lens"]
        if max(lens) >= 4 * (sum(lens) / len(lens)):  # one request far longer than the mean: the cliff
            unsplit_long.add(step.index)
    fired = {i for f in a.findings if f.id == "split-kv-off" for i in f.steps}
    cuda_core_fired = {i for i in fired if any(x.attention.backend == "flashinfer-cuda-core"
                                               for x in a.steps[i].launches)}
    assert unsplit_long, "the collection has split-off steps with a long request"
    assert unsplit_long <= cuda_core_fired
    # Never on a step the planner split.
    for i in fired:
        (key,) = [k for k in by_key if matching(k, a.steps[i].name)]
        assert not by_key[key]["plan"]["split_kv"]
