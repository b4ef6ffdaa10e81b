"""A real Nsight Compute details page beside a trace of the same run (issue 15, item 4).

tests/data/h200_ncu/ (README there): one FlashInfer decode sweep on an H200 (shape A, CUDA-core and FA2 paths,
uniform/skew80 x B in {64, 296, 320}, one step each) captured four times: torch.profiler (the trace), ncu's details
page with four sections, the details page with the sections and the collector's metrics, and ncu's raw page. Each
ncu export holds the 16 attention and merge kernels of the 12 steps.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from traceinsight.ingest import detect, load, ncu_csv, ncu_sm_active

D = Path(__file__).parent / "data" / "h200_ncu"
TRACE = D / "ncu_pair_torch.pt.trace.json.gz"
SIDECAR = D / "ncu_pair_torch.sidecar.json"
DETAILS = D / "ncu_pair_details.ncu.csv.gz"  # --section x4
DETAILS_METRICS = D / "ncu_pair_details_metrics.ncu.csv.gz"  # --section x4 + --metrics (NCU_METRICS)
RAW = D / "ncu_pair_raw.ncu.csv"  # --page raw --metrics (NCU_METRICS)
EXPORTS = (DETAILS, DETAILS_METRICS, RAW)


def _sm_active(export: Path) -> list[dict[str, Any]]:
    db, ids = load([TRACE], ncu=[export], cache=False)
    return ncu_sm_active.sm_active(db, ids[0])


@pytest.fixture(scope="module")
def sm_active() -> dict[Path, list[dict[str, Any]]]:
    return {export: _sm_active(export) for export in EXPORTS}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traceinsight", *map(str, args)], capture_output=True, text=True)


@pytest.mark.parametrize("export", EXPORTS, ids=lambda p: p.name)
def test_each_export_reads_16_kernels_of_the_sweep(export: Path) -> None:
    assert detect(export) == "ncu-csv"
    got = ncu_csv.read(export).tables["ncu_kernels"]
    names = [n.split("<")[0].removeprefix("void ") for n in got["name"]]
    assert (names.count("BatchDecodeWithPagedKVCacheKernel"), names.count("BatchPrefillWithPagedKVCacheKernel"),
            names.count("PersistentVariableLengthMergeStatesKernel")) == (6, 6, 4)
    assert got["ncu_id"] == list(range(16))
    assert set(got["grid_y"]) == {4, 1}  # decode grids (B, H_kv = 4) and FA2 (.., 1): dimensions read on every page


def test_every_export_matches_the_same_trace_kernels(sm_active: dict[Path, list[dict[str, Any]]]) -> None:
    ids = {export: [r["kernel_id"] for r in rows] for export, rows in sm_active.items()}
    assert ids[RAW] == [1, 2, 4, 6, 8, 9, 11, 12, 14, 16, 18, 20, 22, 23, 25, 27]
    assert ids[DETAILS] == ids[RAW] and ids[DETAILS_METRICS] == ids[RAW]


def test_details_page_with_metrics_agrees_with_the_raw_page(sm_active: dict[Path, list[dict[str, Any]]]) -> None:
    """Two runs of the same cases: SM balance (avg/max active cycles) within 0.02 on all 16 kernels, e.g. the
    skew80 B = 320 decode launch 0.035 on both."""
    for a, b in zip(sm_active[DETAILS_METRICS], sm_active[RAW], strict=True):
        assert a["sm_active_avg_over_max"] == pytest.approx(b["sm_active_avg_over_max"], abs=0.02), a["kernel_id"]
    worst = min(sm_active[DETAILS_METRICS], key=lambda r: r["sm_active_avg_over_max"])
    assert worst["kernel_id"] == 14 and round(worst["sm_active_avg_over_max"], 3) == 0.035


def test_sections_alone_give_min_max_only_where_the_imbalance_rule_fired(
        sm_active: dict[Path, list[dict[str, Any]]]) -> None:
    """WorkloadImbalance fired for 5 of the 16 kernels; there the rule's percentages (the first of the maximum,
    the second of the average) give max and min that agree with the raw page (another run of the same case);
    e.g. skew80 B = 296 decode: max 13,523,892 cycles from "93.01% above" of avg 945,320 vs 13,522,445 raw. It did
    not fire for the most imbalanced launch (skew80 B = 320, raw avg/max 0.035), which stays unknown."""
    details = {r["kernel_id"]: r for r in sm_active[DETAILS]}
    raw = {r["kernel_id"]: r for r in sm_active[RAW]}
    fired = sorted(k for k, r in details.items() if r["sm_active_max"] is not None)
    assert fired == [2, 9, 11, 22, 23]
    for k in fired:
        assert details[k]["sm_active_avg_over_max"] == pytest.approx(raw[k]["sm_active_avg_over_max"], abs=0.04), k
    assert details[11]["sm_active_max"] == pytest.approx(13_522_445, rel=0.001)
    assert details[11]["sm_active_min"] == pytest.approx(137_044, rel=0.01)
    assert details[22]["sm_active_max"] == pytest.approx(1_759_620, rel=0.001)
    assert details[14]["sm_active_max"] is None and raw[14]["sm_active_avg_over_max"] < 0.04


def test_details_page_analyzes_alone() -> None:
    res = _cli("analyze", DETAILS, "--format", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["trace"]["format"] == "ncu-csv" and doc["steps"] == []


def _sm_idle(export: Path) -> list[str]:
    res = _cli("analyze", TRACE, "--meta", SIDECAR, "--ncu", export, "--format", "json")
    assert res.returncode == 0, res.stderr
    return [f["summary"] for f in json.loads(res.stdout)["findings"] if f["id"] == "sm-idle"]


def test_sm_idle_from_the_details_page_beside_the_trace() -> None:
    """The sm-idle rule reads the same two findings from the details page with metrics as from the raw page;
    from the sections alone the rule falls back on the schedule model where ncu gave no min/max."""
    raw = _sm_idle(RAW)
    assert raw == [
        "SMs idle 96% of the time in BatchDecodeWithPagedKVCacheKernel (step 5; 2 launches at >= 20%, steps 4-5; ncu)",
        "SMs idle 95% of the time in BatchPrefillWithPagedKVCacheKernel (step 10; 3 launches at >= 20%, steps 9-11; "
        "ncu)"]
    assert _sm_idle(DETAILS_METRICS) == raw
    assert _sm_idle(DETAILS) == [s.replace("; ncu)", "; model+ncu)") for s in raw]


def test_cut_gzip_export_is_one_line_error(tmp_path: Path) -> None:
    cut = tmp_path / "cut.ncu.csv.gz"
    cut.write_bytes(DETAILS.read_bytes()[:9000])
    res = _cli("analyze", TRACE, "--ncu", cut)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        f"traceinsight: error: {cut}: damaged gzip stream (truncated: it ends before the end-of-stream marker)"]


def test_gzip_export_stops_at_the_decompression_limit(tmp_path: Path) -> None:
    """A gzip export is decompressed under the limits every gzip input has ($TRACEINSIGHT_MAX_DECOMPRESSED_BYTES
    here 1 MiB; the raw page's header, then 8 MiB of blank lines): a one-line error, not read to the end."""
    bomb = tmp_path / "bomb.ncu.csv.gz"
    header = next(line for line in RAW.read_bytes().splitlines(keepends=True) if line.startswith(b'"ID"'))
    bomb.write_bytes(gzip.compress(header + b"\n" * (8 << 20), mtime=0))
    res = subprocess.run([sys.executable, "-m", "traceinsight", "analyze", str(bomb)], capture_output=True, text=True,
                         env={**os.environ, "TRACEINSIGHT_MAX_DECOMPRESSED_BYTES": str(1 << 20)})
    assert res.returncode == 2 and "Traceback" not in res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"traceinsight: error: {bomb}: the gzip stream expands past 1.0 MiB (a decompression bomb")


def test_gzip_and_plain_details_pages_read_alike(tmp_path: Path) -> None:
    plain = tmp_path / "d.ncu.csv"
    plain.write_bytes(gzip.decompress(DETAILS.read_bytes()))
    assert ncu_csv.read(plain).tables == ncu_csv.read(DETAILS).tables
