"""Fuzzing the Kineto / torch.profiler JSON reader through the whole analysis (`traceinsight.pipeline.analyze`).

Every input either analyzes or fails with a one-line TraceInsightError (`fuzz_corpus.check_input`); fixed seeds,
bounded examples. benchmarks/fuzz_long.py runs the same tests with many more examples.
"""

from __future__ import annotations

import gzip
import json

import pytest
from fuzz_corpus import (
    DECODE_KERNEL,
    H200_PROPS,
    KINETO_SMALL,
    _event_ends,
    check_bytes,
    cut_kineto,
    dump_json,
    fuzz_settings,
    kineto_doc,
    mutated_kineto,
    real_json_text,
)
from hypothesis import given
from hypothesis import strategies as st


@fuzz_settings(40)
@given(kineto_doc(), st.booleans())
def test_generated_kineto_traces_analyze(doc: dict, compress: bool) -> None:
    out = check_bytes(dump_json(doc, compress), "gen.pt.trace.json.gz" if compress else "gen.json")
    assert out.kind == "ok", out.message
    kernels = sum(1 for e in doc["traceEvents"] if e["cat"] == "kernel")
    steps = sum(1 for e in doc["traceEvents"] if e["cat"] == "user_annotation")
    assert out.kernels == kernels  # every generated kernel is kept
    assert out.ranges == 2 * steps  # the CPU annotation and its GPU projection


@fuzz_settings(150)
@given(mutated_kineto(big_int=False), st.booleans())
def test_mutated_kineto_fields(case: tuple[dict, list[str]], compress: bool) -> None:
    doc, _ = case
    check_bytes(dump_json(doc, compress), "mut.json.gz" if compress else "mut.json")


def test_integer_with_more_digits_than_python_converts() -> None:
    """Found by test_mutated_kineto_fields: orjson reads a 5000-digit integer as a float (infinity, refused),
    the lenient fallback (the json module) refuses more than 4300 digits with ValueError, not a FormatError."""
    data = b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": ' + b"9" * 5000 + b"}]}"
    out = check_bytes(data, "digits.json")
    assert out.kind in ("ok", "error")


@fuzz_settings(80)
@given(cut_kineto())
def test_real_kineto_cut_or_damaged(case: tuple[bytes, str]) -> None:
    data, _ = case
    check_bytes(data, "cut.pt.trace.json.gz")


def test_mutations_reach_the_reader() -> None:
    """The generated traces are not all rejected up front: a valid one yields its kernels (checked by count) and
    a NaN duration is skipped with a warning, not fatal."""
    doc = {
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0, "args": {}},
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5.0, "dur": float("nan"), "args": {}},
        ]
    }
    out = check_bytes(dump_json(doc), "nan.json")
    assert out.kind == "ok" and out.kernels == 1
    assert any("skipped" in w for w in out.warnings), out.warnings


def test_truncated_kineto_keeps_events_before_the_cut() -> None:
    """A trace whose writer died mid-file: the JSON text stops right after a complete event. The kernels before
    the cut are kept (counted independently with the json module on the same prefix) and a warning says where
    the data ends."""
    text = real_json_text(KINETO_SMALL)
    # Kineto writes the CPU events first: cut halfway through the entries that end after the first kernel (the
    # middle of all entries has no kernel before it). json module on that prefix: 2745 entries, 27 of 48 kernels.
    first_kernel = text.index(b'"cat": "kernel"')
    ends = [e for e in _event_ends(KINETO_SMALL) if e > first_kernel]
    cut = ends[len(ends) // 2]
    prefix = text[:cut]
    events = json.loads(prefix[prefix.index(b"[", prefix.index(b'"traceEvents"')) :] + b"]")
    kernels = sum(1 for e in events if e.get("cat") == "kernel")
    assert kernels > 0
    out = check_bytes(gzip.compress(prefix, mtime=0), "half.pt.trace.json.gz")
    assert out.kind == "ok", out.message
    assert out.kernels == kernels
    # One warning says where the data stops and how many events were kept (was: "truncat" or "ends" anywhere).
    assert [w for w in out.warnings if f"the data ends at byte {len(prefix)} inside traceEvents" in w
            and f"kept the {len(events)} events before the cut" in w], out.warnings


def _decode_steps(props: dict) -> dict:
    """Three annotated steps of the FlashInfer CUDA-core decode kernel, with `props` over the H200's properties."""
    events: list[dict] = []
    for s in range(3):
        t = 1000.0 + 300 * s
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t, "dur": 2,
             "args": {"correlation": s + 1}},
            {"ph": "X", "cat": "kernel", "name": DECODE_KERNEL, "pid": 0, "tid": 7, "ts": t + 5, "dur": 100,
             "args": {"device": 0, "stream": 7, "correlation": s + 1, "grid": [256, 4, 1], "block": [16, 8, 1],
                      "registers per thread": 56, "shared memory": 8704}},
            {"ph": "X", "cat": "user_annotation", "name": f"decode tc=0 dist=uniform bs=256 step={s}", "pid": 1,
             "tid": 1, "ts": t - 1, "dur": 200},
        ]  # fmt: skip
    return {"deviceProperties": [{**H200_PROPS, **props}], "traceEvents": events}


def test_decode_steps_with_real_device_properties() -> None:
    out = check_bytes(dump_json(_decode_steps({})), "steps.json")
    assert out.kind == "ok" and out.steps == 3 and out.kernels == 3


@pytest.mark.parametrize("props", [{"numSms": 0}, {"numSms": -5}, {"warpSize": 0}])
def test_non_positive_device_properties(props: dict) -> None:
    out = check_bytes(dump_json(_decode_steps(props)), "props.json")
    assert out.kind in ("ok", "error")
