"""Across-trace summary (traceinsight/report/fleet.py) on the real H200 traces, analyzed by the pipeline.

Independent numbers: 1074 kernels in the sweep and 48 in the small trace (tests/test_kineto.py, json + Decimal),
70 in the nsys export (`sqlite3 ... "select count(*) from CUPTI_ACTIVITY_KIND_KERNEL"`); the sweep has 390 step
ranges (2 paths x 5 distributions x 13 batch sizes x 3 steps, traces/README.md; `zcat ... | grep -c
'"cat": "user_annotation", "name": "decode '` = 390).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from traceinsight.pipeline import analyze
from traceinsight.report.fleet import COLUMNS, FleetRule, fleet_findings, fleet_summary

SWEEP = "flashinfer_decode_sweep.pt.trace.json.gz"
SMALL = "flashinfer_decode_small.pt.trace.json.gz"
NSYS = "flashinfer_decode.sqlite"


@pytest.fixture(scope="module")
def rows(h200: Path) -> list[dict]:
    _, analyses = analyze([h200 / SWEEP, h200 / SMALL, h200 / NSYS])
    return fleet_summary(analyses)


def test_one_row_per_trace(rows: list[dict]) -> None:
    assert [r["trace"] for r in rows] == [SWEEP, SMALL, NSYS]
    assert all(list(r) == list(COLUMNS) for r in rows)
    assert [r["kernels"] for r in rows] == [1074, 48, 70]
    assert [r["format"] for r in rows] == ["kineto", "kineto", "nsys-sqlite"]
    assert {r["gpu"] for r in rows} == {"NVIDIA H200"}
    sweep = rows[0]
    assert sweep["steps"] == 390
    assert sweep["split_kv_on"] + sweep["split_kv_off"] <= 390
    assert sweep["kernel_ns"] == 1_318_666_032
    assert 0.99 < sweep["attention_share"] <= 1.0
    # the B = 384/512 CUDA-core steps take ~13.5 ms (traces/README.md): the slowest step of the sweep
    assert 13_000_000 < sweep["step_max_ns"] < 14_000_000
    assert sweep["step_p50_ns"] <= sweep["step_p99_ns"] <= sweep["step_max_ns"]


def test_fleet_findings_compare_with_the_group_median(rows: list[dict]) -> None:
    rule = FleetRule("slow", "warning", "step_max_ns", 2.0, 0, "{trace} {ratio:.1f}", min_traces=3)
    found = fleet_findings(rows, (rule,))
    maxima = sorted(r["step_max_ns"] for r in rows)
    median = maxima[1]
    assert [f["trace"] for f in found] == [r["trace"] for r in rows if r["step_max_ns"] > 2 * median]
    for f in found:
        assert f["evidence"]["fleet_median"] == median and f["evidence"]["traces"] == 3
    assert fleet_findings(rows[:2], (rule,)) == []  # fewer traces than the rule needs
