"""Co-design arithmetic (traceinsight.diagnose.codesign) and the `traceinsight codesign` command.

Hand checks from the derivation (per KV head: FLOPs 4·G·L·D; bytes 2·L·D·b_kv + 2·G·D·b_q) and the NVIDIA
co-design article (decode ≈ 2·G FLOP/byte with a 1-byte KV cache; prefill 2·G·S/(G+1) with 1-byte everything)."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from traceinsight.cli.main import main
from traceinsight.diagnose.codesign import (
    Shape,
    checks,
    decode_intensity,
    decode_step_kv_bytes,
    prefill_intensity,
    report,
)


def test_intensities() -> None:
    # 1-byte everything (the article's convention): decode 2·G·L/(G+L) -> 2·G; prefill 2·G·S/(G+1).
    assert decode_intensity(8, 32768, 1, 1) == pytest.approx(2 * 8 * 32768 / (8 + 32768))
    assert decode_intensity(8, None, 1, 1) == 16
    assert prefill_intensity(8, 32768, 1, 1) == pytest.approx(2 * 8 * 32768 / 9)
    assert prefill_intensity(8, 32768, 1, 1, causal=True) == pytest.approx(8 * 32768 / 9)
    # bf16 KV and queries: half the FLOP per byte.
    assert decode_intensity(8, None, 2, 2) == 8
    # Doubling G doubles decode intensity; head_dim cancels out (it is not a parameter at all).
    assert decode_intensity(16, None, 1, 2) == 2 * decode_intensity(8, None, 1, 2)


def test_shape_under_tensor_parallelism() -> None:
    s = Shape(32, 4, 128, tp=8)
    assert (s.local_qo_heads, s.local_kv_heads, s.local_group_size, s.kv_replication) == (4, 1, 4.0, 2.0)
    # 64 x 32K tokens, one layer, bf16: 2 (K, V) x 128 x 1 head x 2 bytes = 512 bytes per token per GPU.
    assert decode_step_kv_bytes(s, 64 * 32768) == 64 * 32768 * 512
    with pytest.raises(ValueError):
        Shape(32, 5, 128)


def test_checks_with_reasons() -> None:
    by = {c.name: c for c in checks(Shape(32, 4, 96, tp=8))}
    assert not by["tp-vs-kv-heads"].ok and "2 GPUs" in by["tp-vs-kv-heads"].message
    assert "several ranks keep a full copy of the same KV head" in by["tp-vs-kv-heads"].reason
    assert "grow 2x across the group" in by["tp-vs-kv-heads"].reason  # TP 8 over 4 KV heads: two copies of each
    assert not by["head-dim-multiple-of-128"].ok and by["head-dim-multiple-of-128"].evidence["padded_head_dim"] == 128
    assert by["tp-divides-heads"].ok and by["group-size"].ok and by["head-dim-tmem"].ok
    small = {c.name: c for c in checks(Shape(32, 32, 128))}
    assert not small["group-size"].ok and small["group-size"].evidence["local_group_size"] == 1
    assert all(c.ok for c in checks(Shape(32, 4, 128, tp=4)))
    assert not {c.name: c for c in checks(Shape(48, 6, 128, tp=4))}["tp-divides-heads"].ok


def test_report_roofline_floor() -> None:
    doc = report(Shape(32, 4, 128, tp=8), 4.8e12, "h200", kv_len=32768, batch=64, layers=2)
    step = doc["step"]
    assert step["kv_bytes_per_gpu"] == 2 * 64 * 32768 * 512
    assert step["roofline_floor_ns"] == round(2 * 64 * 32768 * 512 / 4.8e12 * 1e9)  # 447,392 ns
    assert doc["ridge_flop_per_byte"] == pytest.approx(989e12 / 4.8e12)


def test_cli_text_and_json() -> None:
    r = CliRunner().invoke(main, ["codesign", "--qo-heads", "32", "--kv-heads", "4", "--head-dim", "128", "--tp", "8",
                                  "--gpu", "h200", "--kv-len", "32768", "--batch", "64"])
    assert r.exit_code == 0, r.output
    assert "TP 8 > 4 KV heads" in r.output and "roofline floor 223.7 us" in r.output
    r = CliRunner().invoke(main, ["codesign", "--qo-heads", "32", "--kv-heads", "4", "--head-dim", "96",
                                  "--kv-dtype", "fp8", "--format", "json"])
    assert r.exit_code == 0
    doc = orjson.loads(r.stdout)
    assert doc["schema"] == "traceinsight.codesign/1" and doc["decode_flop_per_byte_limit"] == 16.0
    assert [c["name"] for c in doc["checks"] if not c["ok"]] == ["head-dim-multiple-of-128"]


@pytest.mark.parametrize("args, message", [
    (["--qo-heads", "32", "--kv-heads", "5", "--head-dim", "128"], "--qo-heads 32 is not a multiple of --kv-heads 5"),
    (["--qo-heads", "32", "--kv-heads", "4", "--head-dim", "128", "--gpu", "h9000"], "--gpu h9000: unknown GPU"),
    (["--qo-heads", "0", "--kv-heads", "4", "--head-dim", "128"], "Invalid value for '--qo-heads'"),
])
def test_cli_bad_arguments_exit_2(args: list[str], message: str) -> None:
    r = CliRunner().invoke(main, ["codesign", *args])
    assert r.exit_code == 2
    assert message in r.stderr
    if "Invalid value" not in message:
        assert len(r.stderr.strip().splitlines()) == 1
