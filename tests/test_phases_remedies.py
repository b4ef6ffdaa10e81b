"""Phases from query lengths, tile padding of mixed launches, and remedies that never recommend what the trace
already uses (remedies.toml)."""

from __future__ import annotations

import pytest

from traceinsight.diagnose import fa3, remedies
from traceinsight.diagnose.attribution import COMPONENT_CAUSES, HOST_LAUNCH_BOUND, HOST_STALL
from traceinsight.diagnose.rules.latency_spike import ATTENTION_CAUSES
from traceinsight.model.phases import mixed_from_tiles, phase_from_query_lengths, tile_padding


def test_phase_from_query_lengths() -> None:
    assert phase_from_query_lengths([1, 1, 1])[0] == "decode"
    assert phase_from_query_lengths([4096])[0] == "prefill"
    phase, why = phase_from_query_lengths([1] * 48 + [1024])
    assert phase == "mixed" and "48 decode rows" in why and "1024 query rows" in why
    assert phase_from_query_lengths([]) is None


def test_tile_padding_of_a_mixed_launch() -> None:
    # 48 decode requests of G = 8 rows each in 128-row tiles (120 padded rows each) and a 1024-token chunk
    # (8192 rows: 64 full tiles).
    p = tile_padding([1] * 48 + [1024], tile_rows=128, group=8)
    assert p is not None
    assert p["tiles"] == 48 + 64 and p["rows"] == 48 * 8 + 8192 and p["decode_rows"] == 384
    assert p["padded_rows"] == 48 * 120
    assert p["padding_share"] == pytest.approx(48 * 120 / ((48 + 64) * 128))
    assert p["decode_tile_share"] == pytest.approx(48 / 112)
    assert tile_padding([1, 1], tile_rows=0) is None


FACTS = {
    "fa3": remedies.Facts(frozenset({"fa3"}), cuda_graph=False, chunked=False),
    "flashinfer": remedies.Facts(frozenset({"flashinfer-cuda-core"}), cuda_graph=False, chunked=False),
    "graph": remedies.Facts(frozenset({"flashinfer-fa2"}), cuda_graph=True, chunked=True),
}


@pytest.mark.parametrize("cause", sorted({*ATTENTION_CAUSES, *COMPONENT_CAUSES.values(), HOST_STALL,
                                           HOST_LAUNCH_BOUND, "attention", "kernels:gemm", "kernels:norm",
                                           *fa3.REMEDY.values()}
                                          - {"wave-quantization", "slow-path", "kv-bandwidth"}))
def test_every_cause_has_a_remedy_that_fits_the_trace(cause: str) -> None:
    for name, facts in FACTS.items():
        text = remedies.remedy(cause, facts, b_th=297, cap=296)
        assert text, (cause, name)
        assert "{" not in text, text
        if name == "fa3":  # never "use FlashAttention-3" to a trace that runs it
            assert "FlashAttention-3's dynamic split)" not in text and "as FlashAttention-3" not in text, text
        if name == "graph":  # CUDA graphs and chunked prefill are in use already
            assert "Capture the decode step in a CUDA graph" not in text, text
            assert "Enable chunked prefill" not in text, text


@pytest.mark.parametrize(("cause", "phrase", "uses_it", "lacks_it"), [
    ("split-kv-off", "FlashAttention-3's dynamic split)", "fa3", "flashinfer"),
    ("split-kv-starved", "FlashAttention-3's dynamic split)", "fa3", "flashinfer"),
    ("tail-ctas", "as FlashAttention-3", "fa3", "flashinfer"),
    ("host-launch-bound", "Capture the decode step in a CUDA graph", "graph", "flashinfer"),
    ("prefill", "Enable chunked prefill", "graph", "flashinfer"),
])
def test_each_withheld_remedy_is_offered_where_the_trace_lacks_it(cause: str, phrase: str, uses_it: str,
                                                                  lacks_it: str) -> None:
    """The withheld advice above is not withheld everywhere (which would make those checks hold vacuously): a
    trace without FA3 / CUDA graphs / chunked prefill is told to use it, one that uses it is not."""
    assert phrase in remedies.remedy(cause, FACTS[lacks_it], b_th=297, cap=296)
    assert phrase not in remedies.remedy(cause, FACTS[uses_it], b_th=297, cap=296)


def test_remedy_placeholders_read_generically_when_unknown() -> None:
    known = remedies.remedy("split-kv-off", FACTS["flashinfer"], b_th=297, cap=296)
    assert known.startswith("Keep decode batches below B_th = 297 (cap running requests at 296) ")
    text = remedies.remedy("split-kv-off", FACTS["flashinfer"])  # no threshold known: each placeholder in words
    assert text == known.replace("297", "B_th").replace("296", "B_th - 1")
    assert remedies.remedy("no-such-cause", FACTS["flashinfer"]) == ""
    # kernels:<family> falls back to the generic entry with the family's name.
    assert remedies.remedy("kernels:rope", FACTS["flashinfer"]).startswith("Rope kernels took longer")


def test_mixed_from_tiles_reads_the_tile_count_against_the_running_batch() -> None:
    """The loop's FA2 chunk (examples/loop): 50 decode requests and a 1024-row chunk in 114 tiles of 128 rows at
    G = 8 is mixed; the prefill-only step (7722 rows in 483 tiles) fits prefill alone and stays prefill; a tile
    count that neither reading explains says nothing."""
    qo, group, evidence = mixed_from_tiles(114, 128, 1074, [50, 51])  # type: ignore[misc]
    assert qo == [1] * 50 + [1024] and group == 8 and "50 decode and 1024 prefill rows" in evidence
    assert tile_padding(qo, 128, group)["prefill_rows"] == 1024 * 8  # type: ignore[index]
    assert mixed_from_tiles(483, 128, 7722, [48, 49]) is None
    assert mixed_from_tiles(1000, 128, 1074, [50]) is None
    assert mixed_from_tiles(290, 64, 1186, [160, 162]) is not None  # the CUDA-core run's chunk: CTA_TILE_Q 64
