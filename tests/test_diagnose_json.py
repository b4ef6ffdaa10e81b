"""The analysis JSON (schema traceinsight.analysis/1) with the schedule model and findings: thresholds,
per-step batch, per-launch model / measured, findings, checks; through the library and `analyze --format json`."""

from __future__ import annotations

from pathlib import Path

import orjson
from click.testing import CliRunner
from test_diagnose_common import FA2, FA2_META, fa2, sweep

from traceinsight.cli.main import main
from traceinsight.report.saved import document_of


def test_document_carries_the_model_and_findings() -> None:
    a = sweep(True)
    doc = orjson.loads(orjson.dumps(document_of(a), option=orjson.OPT_NON_STR_KEYS))
    assert doc["schema"] == "traceinsight.analysis/1"
    th = {t["kernel"]: t for t in doc["thresholds"]}
    assert {k: (t["occupancy"], t["max_grid"], t["b_threshold"], t["kv_heads"]) for k, t in th.items()} == {
        "BatchDecodeWithPagedKVCacheKernel": (9, 1188, 297, 4), "PrefillWithKVCacheKernel": (1, 132, None, 4)}
    step = next(s for s in doc["steps"] if s["name"] == "decode tc=0 dist=skew80 bs=256 step=0")
    assert step["batch"]["source"] == "sidecar" and step["batch"]["batch_size"] == 256
    assert step["batch"]["max_kv_len"] == 209715
    [launch] = step["launches"]
    assert set(launch["model"]) >= {"source", "work_items", "chunk_tokens", "split_kv", "predicted_ns", "sm_idle",
                                    "tail_ns"}
    # plan_info of this case: padded 297, split on; 1188 work items (297 x 4 heads), chunk 5008 tokens.
    assert (launch["model"]["source"], launch["model"]["split_kv"], launch["model"]["work_items"],
            launch["model"]["chunk_tokens"]) == ("sidecar", True, 1188, 5008)
    assert launch["measured"]["sm_active_max"] == 1020054.0 and launch["measured"]["sm_active_avg"] == 797242.58
    assert len([s for s in doc["steps"] if "measured" in s["launches"][0]]) == 6
    f = doc["findings"][0]
    assert list(f) == ["id", "severity", "steps", "summary", "evidence", "remedy", "saving_ns", "explanation", "ref",
                       "supports", "related", "attributed_saving_ns", "saving_basis", "saving_in_steps_ns",
                       "saving_between_steps_ns"]
    assert f["severity"] == "critical"
    assert [c["id"] for c in doc["checks"]][-2:] == ["latency-spike", "slow-steps"]
    assert doc["model"]["gpu"]["num_sms"] == 132 and len(doc["model"]["cost_models"]) == 2


def test_analyze_cli_json_without_sidecar() -> None:
    r = CliRunner().invoke(main, ["analyze", str(FA2), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = orjson.loads(r.stdout)
    [t] = doc["thresholds"]
    assert (t["backend"], t["b_threshold"], t["max_grid"], t["occupancy"]) == ("flashinfer-fa2", 66, 264, 2)
    launch = doc["steps"][0]["launches"][0]
    assert launch["model"]["source"] == "trace" and launch["model"]["predicted_ns"] is None
    assert "measured" not in launch and doc["steps"][0]["batch"]["source"] == "trace"
    ids = {f["id"] for f in doc["findings"]}
    assert {"split-kv-off", "split-kv-starved", "decode-on-prefill-kernel", "latency-spike"} <= ids
    r = CliRunner().invoke(main, ["analyze", str(FA2), "--meta", str(FA2_META), "--format", "json"])
    assert r.exit_code == 0
    doc = orjson.loads(r.stdout)
    assert doc["steps"][0]["launches"][0]["model"]["source"] == "sidecar"
    assert {c["status"] for c in doc["checks"]} <= {"fired", "passed", "not-applicable"}


def test_json_holds_the_steps_that_matter_and_streams_all_on_request(tmp_path: Path) -> None:
    """Default: the steps the findings name and the slowest, with a step_summary over every step; --steps all:
    every step, one per line, the same document as the library's (issue 13, item 3)."""
    from traceinsight.report.json_doc import SLOWEST_STEPS
    from traceinsight.report.saved import documents, in_memory

    a = fa2(True)
    full = orjson.loads(orjson.dumps(documents(in_memory([a]), "all"), option=orjson.OPT_NON_STR_KEYS))
    out_all, out_sel = tmp_path / "all.json", tmp_path / "sel.json"
    args = ["analyze", str(FA2), "--meta", str(FA2_META), "--format", "json", "-q"]
    assert CliRunner().invoke(main, [*args, "--steps", "all", "--out", str(out_all)]).exit_code == 0
    assert CliRunner().invoke(main, [*args, "--out", str(out_sel)]).exit_code == 0
    streamed, selected = orjson.loads(out_all.read_bytes()), orjson.loads(out_sel.read_bytes())
    assert streamed["steps_included"] == "all" and len(streamed["steps"]) == len(a.steps) == 195
    assert [s["index"] for s in streamed["steps"]] == [s["index"] for s in full["steps"]]
    assert streamed["steps"][5] == full["steps"][5] and streamed["findings"] == full["findings"]
    assert out_all.read_text().count('\n{"index":') == len(a.steps)  # one step per line
    # The selection: every step a finding's evidence names as worst, the slowest steps, each as in the full list.
    by_index = {s["index"]: s for s in streamed["steps"]}
    got = {s["index"] for s in selected["steps"]}
    assert selected["steps_included"] == "selected" and 0 < len(got) < len(a.steps) / 2
    assert {f["evidence"]["worst_step"] for f in selected["findings"] if "worst_step" in f["evidence"]} <= got
    slowest = sorted(streamed["steps"], key=lambda s: -s["wall_ns"])[:SLOWEST_STEPS]
    assert {s["index"] for s in slowest} <= got
    assert all(s == by_index[s["index"]] for s in selected["steps"])
    summary = selected["step_summary"]
    assert summary == streamed["step_summary"] and summary["count"] == 195
    assert summary["total_ns"] == sum(s["dur_ns"] for s in streamed["steps"])
    assert summary["split_kv"]["off"] == sum(x["split_kv"] is False for s in streamed["steps"] for x in s["launches"])


def test_diff_of_saved_documents_counts_every_step_whatever_they_hold(tmp_path: Path) -> None:
    from traceinsight.report.diff import diff_docs

    out_all, out_sel = tmp_path / "all.json", tmp_path / "sel.json"
    args = ["analyze", str(FA2), "--format", "json", "-q"]
    CliRunner().invoke(main, [*args, "--steps", "all", "--out", str(out_all)])
    CliRunner().invoke(main, [*args, "--out", str(out_sel)])
    old = orjson.loads(out_all.read_bytes())
    del old["step_summary"]  # a document written before step_summary existed: counted from its steps
    sel = orjson.loads(out_sel.read_bytes())
    d = diff_docs(old, sel)
    assert d["steps"]["before"] == d["steps"]["after"] and d["steps"]["after"]["count"] == len(old["steps"])
