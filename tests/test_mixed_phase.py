"""Issue 27 item 3: chunked-prefill steps (one launch serving the decode batch and a prompt chunk) are named
`mixed`, with their decode and prefill shares, on the H200 captures made for it (examples/mixed: FlashInfer's FA2
and SM90 prefill kernels, truth in the sidecars' `phase` and `qo_lens`)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from traceinsight.pipeline import analyze

MIXED = Path(__file__).resolve().parents[1] / "examples" / "mixed"


def _truth(name: str) -> dict[str, Any]:
    with gzip.open(MIXED / f"{name}.sidecar.json.gz") as fh:
        return {s["key"]: s for s in json.load(fh)["steps"]}


@pytest.mark.parametrize(("name", "meta"), [("mixed_fa2_torch", True), ("mixed_fa2_torch", False),
                                            ("mixed_sm90_torch", True)])
def test_every_step_gets_the_phase_of_its_query_lengths(name: str, meta: bool) -> None:
    """With the sidecar, from its query lengths; on the FA2 run without it (kernels and ProfilerStep only), from
    each launch's query tiles against the running decode batch: all 11 mixed steps and 29 decode steps."""
    truth = _truth(name)
    _, (a,) = analyze([MIXED / f"{name}.pt.trace.json.gz"], meta=[MIXED / f"{name}.sidecar.json.gz"] if meta else [],
                      cache=False)
    assert [s.phase for s in a.steps] == [truth[s.name]["phase"] for s in a.steps]
    assert sum(s.phase == "mixed" for s in a.steps) == 11
    for s in a.steps:
        if s.phase != "mixed" or "sm90" in name:  # SM90's persistent kernel states no query tile
            continue
        qo = truth[s.name]["qo_lens"]
        for x in s.launches:
            assert x.tiles is not None, s.name
            assert x.tiles["decode_rows"] == 8 * sum(1 for q in qo if q == 1)  # G = 64 / 8 query heads per KV head
            assert x.tiles["prefill_rows"] == 8 * sum(q for q in qo if q > 1)


def test_sm90_without_its_sidecar_says_unknown_rather_than_guess() -> None:
    """FlashInfer's SM90 prefill kernel runs a persistent grid (one CTA per SM) whatever the batch: no tile count
    to read, so without the sidecar every step stays unknown, none is called decode or prefill wrongly."""
    _, (a,) = analyze([MIXED / "mixed_sm90_torch.pt.trace.json.gz"], cache=False)
    assert {s.phase for s in a.steps} == {"unknown"}
