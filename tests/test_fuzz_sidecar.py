"""Fuzzing the sidecar reader (`traceinsight.sidecar/1` and the legacy case lists), alone and attached to the
real Nsight Systems trace. Every input analyzes or fails with a one-line TraceInsightError."""

from __future__ import annotations

import pytest
from fuzz_corpus import NSYS_REAL, check_input, dump_json, fuzz_settings, scratch, sidecar_doc
from hypothesis import given

from traceinsight.errors import FormatError
from traceinsight.ingest import sidecar


@fuzz_settings(20)
@given(sidecar_doc())
def test_generated_sidecars_attach(case: tuple[object, list[str]]) -> None:
    doc, _ = case
    with scratch("gen.meta.json") as path:
        path.write_bytes(dump_json(doc))
        out = check_input(NSYS_REAL, meta=[path])
    assert out.kind == "ok", out.message


@fuzz_settings(100)
@given(sidecar_doc(mutate=True, big_int=False))
def test_mutated_sidecars_alone_and_attached(case: tuple[object, list[str]]) -> None:
    doc, _ = case
    with scratch("mut.meta.json") as path:
        path.write_bytes(dump_json(doc))
        check_input(path)
        check_input(NSYS_REAL, meta=[path])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("batch_size", 2**31, "$.steps[0].batch_size: expected an integer <= 2147483647, got 2147483648"),
        (
            "kv_lens",
            [2**63],
            "$.steps[0].kv_lens[0]: expected an integer <= 9223372036854775807, got 9223372036854775808",
        ),
    ],
)
def test_integers_beyond_the_columns_are_one_line_errors(field: str, value: object, message: str) -> None:
    """Found by the fuzzer: integers past int32/int64 passed validation and overflowed in the database."""
    doc = {"schema": "traceinsight.sidecar/1", "steps": [{"key": "tc=0 bs=1", "batch_size": 1, field: value}]}
    with pytest.raises(FormatError) as info:
        sidecar.validate(doc, source="s.json")
    assert str(info.value) == f"s.json: sidecar {message}"
