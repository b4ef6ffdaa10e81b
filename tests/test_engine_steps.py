"""Serving engines' iteration annotations (model/engine_steps.toml): every pattern reads its own examples as its
`expect` says and no earlier pattern takes them; on real engine traces one engine iteration is one step, with the
phase, batch size and token counts its annotation states."""

from __future__ import annotations

from pathlib import Path

import pytest

from traceinsight.errors import FormatError
from traceinsight.model import engine_steps

REPO = Path(__file__).resolve().parents[1]
TRACELENS = REPO / "tests" / "data" / "foreign" / "tracelens"


@pytest.mark.parametrize("a", engine_steps.patterns(), ids=lambda a: f"{a.engine}:{a.pattern.pattern[:30]}")
def test_each_pattern_reads_its_examples(a: engine_steps.Annotation) -> None:
    assert a.examples, "every pattern carries examples from its source"
    assert len(a.expect) in (0, len(a.examples))
    for i, example in enumerate(a.examples):
        info = engine_steps.match(example)
        assert info is not None, example
        # The first pattern that matches is this one: a more general one placed earlier would steal its names.
        assert info.engine == a.engine and info.level == a.level, (example, info)
        if a.expect:
            got = info.fields()
            for k, v in a.expect[i].items():
                assert got.get(k) == v, (example, k, got)


def test_unrelated_names_are_no_annotation() -> None:
    for name in ("execute_model", "aten::mm", "decode tc=0 dist=uniform bs=8 step=0", "ProfilerStep",
                 "gpu_model_runner: forward_x", "stepper", "nccl:all_reduce", ""):
        info = engine_steps.match(name)
        assert info is None, (name, info)


def test_derived_counts() -> None:
    """vLLM's name gives request and token counts per phase; the batch, its KV tokens and the phase follow."""
    info = engine_steps.match("execute_40_context_1(sq8sk8sqsq64sqsk64)_generation_32(sq32sk32785sqsq32sqsk32785)")
    assert info is not None and info.fields()["phase"] == "mixed"
    assert info.batch_size == 33 and info.kv_tokens == 32793


@pytest.mark.parametrize("text, message", [
    ("version = 2", "expected version = 1"),
    ('version = 1\n[[annotation]]\nengine = "x"\npattern = "("\nlevel = "iteration"', "not a regex"),
    ('version = 1\n[[annotation]]\nengine = "x"\npattern = "(?P<bs>1)"\nlevel = "iteration"', "not among"),
    ('version = 1\n[[annotation]]\nengine = "x"\npattern = "a"\nlevel = "layer"', "level must be"),
    ('version = 1\n[[annotation]]\nengine = "x"\npattern = "a"\nlevel = "scope"\nphase = "warm"', "phase"),
])
def test_bad_patterns_file(text: str, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        engine_steps.parse(text)


def test_one_engine_iteration_is_one_step() -> None:
    """TraceLens' SGLang (MI300X, Qwen3-8B, one decode iteration replayed from a HIP graph) and vLLM (gpt-oss, full
    graph) traces: each holds one iteration of 36 / 24 attention layers. Each was 36 / 24 steps, one per layer, since
    the iteration's range held every attention launch and was taken for a whole-run wrapper."""
    from traceinsight.pipeline import analyze

    for name, layers, kv in (("sglang_mi300x_Qwen3-8B_decode.json.gz", 36, 32785),
                             ("vllm_mi300x_gptoss_decode_graph_execution.json.gz", 24, 55086)):
        _, (a,) = analyze([TRACELENS / name], cache=False)
        assert len(a.steps) == 1, name
        (s,) = a.steps
        assert s.evidence == "engine" and a.extra["steps_from"] == "the serving engine's iteration annotations"
        assert s.name.startswith("execute_32_context_0(") and len(s.launches) == layers
        assert s.phase == "decode" and {x.phase for x in s.launches} == {"decode"}
        assert a.schedule is not None
        b = a.schedule.batches[0]
        assert (b.batch_size, b.total_kv_tokens, b.phase, b.decode_requests) == (32, kv, "decode", 32)
        # Replayed from one HIP graph: the whole forward (a full graph), on an MI300X (the vLLM trace names none).
        assert (b.cuda_graph, b.graph_mode) == (True, "full") and a.schedule.gpu is not None
        assert a.schedule.gpu.name == "AMD Instinct MI300X"


def test_piecewise_graph_and_mixed_step() -> None:
    """TraceLens' vLLM piecewise step (9 prefill and 37 decode requests): 25 graph pieces between 24 eager attention
    launches; the step is mixed and so is each unified-attention launch that served both."""
    from traceinsight.pipeline import analyze

    _, (a,) = analyze([REPO / "examples" / "engines" /
                       "tracelens_vllm_prefilldecode_piecewise__graph_execution.json.gz"], cache=False)
    (s,) = a.steps
    assert s.phase == "mixed" and {x.phase for x in s.launches} == {"mixed"} and len(s.launches) == 24
    assert a.schedule is not None
    b = a.schedule.batches[0]
    assert (b.batch_size, b.prefill_requests, b.decode_requests, b.query_tokens) == (46, 9, 37, 8192)
    assert (b.cuda_graph, b.graph_mode) == (True, "piecewise")
    # SGLang's own span nested in the iteration's range completes what the outer name says.
    _, (a,) = analyze([TRACELENS / "sglang_mi300x_Qwen3-8B_decode.json.gz"], cache=False)
    assert a.steps[0].engine is not None and a.steps[0].engine.batch_size == 32


def _recovered(trace: Path) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The trace's ProfilerStep#N steps (its own truth) and the iterations recovered with every range held out:
    each as (first attention kernel id, attention launches)."""
    from traceinsight.ingest import load
    from traceinsight.model.steps import group_steps

    db, *_ = load([trace])
    truth, _ = group_steps(db, 0)
    assert {s.evidence for s in truth} == {"profiler"}
    db.con.execute("DELETE FROM ranges")
    found, _ = group_steps(db, 0)
    assert {s.evidence for s in found} == {"recovered"}
    return ([(s.launches[0].attention.kernel_id, len(s.launches)) for s in truth],
            [(s.launches[0].attention.kernel_id, len(s.launches)) for s in found])


@pytest.mark.parametrize("name", ["loop_core_graph_torch", "loop_fa2_torch"])
def test_iterations_recovered_without_annotations(name: str) -> None:
    """Our decode loops (4 layers, 240 iterations with prefills, long requests and host stalls injected; eager FA2
    and CUDA-graph CUDA-core) with their ranges deleted: the iterations recovered from the host gaps are exactly
    the loop's ProfilerStep#N steps, though the injected stalls inside steps are longer than the gaps between them."""
    truth, found = _recovered(REPO / "examples" / "loop" / f"{name}.pt.trace.json.gz")
    assert len(truth) == 240 and found == truth


def test_single_forward_and_kernel_benchmarks() -> None:
    """Without annotations: one model forward (TraceLens' piecewise vLLM mixed step, ranges deleted) is one step;
    a kernel benchmark (attention launches with nothing between them) stays one step per launch."""
    from traceinsight.ingest import load
    from traceinsight.model.steps import group_steps

    db, *_ = load([REPO / "examples" / "engines" / "tracelens_vllm_prefilldecode_piecewise__graph_execution.json.gz"])
    db.con.execute("DELETE FROM ranges")
    steps, _ = group_steps(db, 0)
    assert len(steps) == 1 and len(steps[0].launches) == 24 and steps[0].evidence == "recovered"
    db, *_ = load([REPO.parent / "shared" / "traces" / "h200" / "flashinfer_decode_small.pt.trace.json.gz"])
    db.con.execute("DELETE FROM ranges")
    steps, _ = group_steps(db, 0)
    assert len(steps) > 1 and all(s.evidence == "launch" and len(s.launches) == 1 for s in steps)
