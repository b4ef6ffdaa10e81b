"""The analysis JSON (schema traceinsight.analysis/1) with the schedule model and findings: thresholds,
per-step batch, per-launch model / measured, findings, checks; through the library and `analyze --format json`."""

from __future__ import annotations

import orjson
from click.testing import CliRunner
from test_diagnose_common import FA2, FA2_META, sweep

from traceinsight.cli.main import main
from traceinsight.report.json_doc import to_json


def test_document_carries_the_model_and_findings() -> None:
    a = sweep(True)
    doc = orjson.loads(orjson.dumps(to_json(a), option=orjson.OPT_NON_STR_KEYS))
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
    assert list(f) == ["id", "severity", "steps", "summary", "evidence", "remedy", "saving_ns", "explanation"]
    assert f["severity"] == "critical"
    assert [c["id"] for c in doc["checks"]][-1] == "latency-spike"
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
