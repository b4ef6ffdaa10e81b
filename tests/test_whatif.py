"""Counterfactual replays (traceinsight.diagnose.whatif) and the `traceinsight whatif` command.

Measured times from a json.load of the Kineto files: CUDA-core skew80 B = 512 takes 13.54 ms (split-KV off,
one CTA per KV head walks the 209,715-token request), uniform batches ~0.34 ms; the SM90 path on skew80
B = 512 3.39-3.41 ms; FA2 skew80 B = 64 0.976 ms and B = 128 2.68 ms."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from test_diagnose_common import FA2, FA2_META, SWEEP, sweep

from traceinsight.cli.main import main
from traceinsight.diagnose.whatif import replay_step, replayable_steps


def test_replay_of_the_cliff_step() -> None:
    a = sweep(True)
    st = next(s for s in a.steps if s.name == "decode tc=0 dist=skew80 bs=512 step=0")
    r = replay_step(a.schedule, st)
    assert (r.batch_size, r.max_kv_len, r.b_threshold) == (512, 209715, 297)
    assert r.measured_ns == st.launches[0].attention.dur_ns and r.measured_ns > 13_500_000
    alt = {x.name: x for x in r.alternatives}
    assert list(alt) == ["as-run", "split-kv-kept-on", "fa3-dynamic-split", "flashinfer-fa2", "flashinfer-sm90",
                         "batch-capped"]
    assert abs(alt["as-run"].predicted_ns / r.measured_ns - 1) < 0.1 and alt["as-run"].split_kv is False
    # Kept on, the planner cuts the long request like a balanced batch: about the uniform 0.34 ms.
    kept = alt["split-kv-kept-on"]
    assert kept.split_kv is True and kept.predicted_ns < 500_000 and kept.chunk_tokens < 2048
    fa3 = alt["fa3-dynamic-split"]
    assert fa3.predicted_ns < 500_000 and "default cost model" in fa3.assumption
    # SM90 ran in this trace: its calibrated model, no assumption; 3.35 ms predicted vs 3.39 ms measured.
    assert alt["flashinfer-sm90"].assumption is None and 3_000_000 < alt["flashinfer-sm90"].predicted_ns < 3_700_000
    # Capped at B_th - 1 = 296: two steps, the first still starved (one spare work item for the long request).
    capped = alt["batch-capped"]
    assert capped.steps == 2 and capped.predicted_ns > 5_000_000 and capped.total_ns >= capped.predicted_ns
    assert replayable_steps(a.schedule, a.steps) == [s.index for s in a.steps]
    assert replayable_steps(sweep(False).schedule, sweep(False).steps) == []


def _run(*args: str):
    return CliRunner().invoke(main, ["whatif", *args], env={"COLUMNS": "200"})


def test_cli_one_step_text_and_json() -> None:
    # Step 144 of the FA2 sweep is 'decode tc=1 backend=fa2 dist=skew80 bs=128 step=0' (195 steps in case order).
    r = _run(str(FA2), "--meta", str(FA2_META), "--step", "144")
    assert r.exit_code == 0, r.output
    assert "step 144 decode tc=1 backend=fa2 dist=skew80 bs=128 step=0" in r.output
    assert "split-KV kept on" in r.output and "most 65 requests per step" in r.output  # table cells wrap
    r = _run(str(FA2), "--meta", str(FA2_META), "--step", "144", "--format", "json")
    assert r.exit_code == 0
    doc = orjson.loads(r.stdout)
    assert doc["schema"] == "traceinsight.whatif/1" and [s["step"] for s in doc["steps"]] == [144]
    s = doc["steps"][0]
    assert (s["batch_size"], s["b_threshold"], s["measured_ns"]) == (128, 66, 2677104)
    names = [a["name"] for a in s["alternatives"]]
    assert names == ["as-run", "split-kv-kept-on", "fa3-dynamic-split", "flashinfer-cuda-core", "flashinfer-sm90",
                     "batch-capped"]
    kept = s["alternatives"][1]
    assert kept["split_kv"] is True and kept["predicted_ns"] < s["measured_ns"] / 3


def test_cli_default_step_is_the_slowest_known() -> None:
    r = _run(str(FA2), "--meta", str(FA2_META), "--format", "json")
    assert r.exit_code == 0
    [s] = orjson.loads(r.stdout)["steps"]
    assert "skew80" in s["name"] and s["measured_ns"] > 2_900_000


@pytest.mark.parametrize("args, message", [
    ([str(FA2)], "no step has a known batch composition (KV lengths): pass --meta SIDECAR"),
    ([str(FA2), "--meta", str(FA2_META), "--step", "999"], "no step 999 (the trace has 195 steps, 0..194)"),
    ([str(FA2), "--meta", str(FA2_META), "--step", "3", "--all"], "--step and --all exclude each other"),
    (["/nonexistent/trace.json"], "/nonexistent/trace.json"),
])
def test_cli_errors_are_one_line_exit_2(args: list[str], message: str) -> None:
    r = _run(*args)
    assert r.exit_code == 2, r.output
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert r.stdout == ""


def test_cli_all_steps_of_a_small_capture() -> None:
    nsys = Path(__file__).resolve().parents[1] / "examples/collected"
    r = _run(str(nsys / "sweep_q64kv8d128_nsys.sqlite"), "--meta", str(nsys / "sweep_q64kv8d128_nsys.sidecar.json"),
             "--all", "--format", "json")
    assert r.exit_code == 0, r.output
    steps = orjson.loads(r.stdout)["steps"]
    assert len(steps) == 56  # 2 paths x 2 distributions x 7 batch sizes x 2 steps (the capture's README)
    assert {s["b_threshold"] for s in steps} == {148, 33}
    assert str(SWEEP)  # the Kineto sweep is replayed in test_replay_of_the_cliff_step


def test_whatif_speaks_in_savings_with_totals() -> None:
    """It printed a ratio ('0.03x') where a saving was meant, and 5,580 lines with --all (issue 14)."""
    r = _run(str(FA2), "--meta", str(FA2_META), "--step", "144")
    assert r.exit_code == 0, r.output
    assert "saves " in r.output and "model " in r.output  # the as-run row is the model's error
    assert not __import__("re").search(r"\d\.\d\dx\b", r.output)
    r = _run(str(FA2), "--meta", str(FA2_META), "--all")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert len(lines) <= 40, len(lines)
    assert lines[0].startswith("195 steps replayed, measured ")
    assert any("saves " in line and " steps" in line for line in lines)
    from traceinsight.diagnose.whatif import replay_step, replayable_steps, totals
    from traceinsight.pipeline import analyze

    _, (a,) = analyze([FA2], meta=[FA2_META], diagnostics=False, cache=False)
    assert a.schedule is not None
    by_index = {s.index: s for s in a.steps}
    replays = [replay_step(a.schedule, by_index[i]) for i in replayable_steps(a.schedule, a.steps)]
    rows = {row["name"]: row for row in totals(replays)}
    # Totals add up: measured - predicted = saving for every alternative; the as-run replay is never the best.
    for row in rows.values():
        assert row["measured_ns"] - row["cost_ns"] == row["saving_ns"]
    assert rows["as-run"]["best_in"] == 0
    assert sum(row["best_in"] for row in rows.values()) <= len(replays)
