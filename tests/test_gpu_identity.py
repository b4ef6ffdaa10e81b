"""A GPU the trace does not name (or names as nothing the table knows) is identified from its compute capability,
SM / CU count and memory (model/gpus.py `match_gpu_by_properties`), on the device rows of real traces: TraceLens'
vLLM MI300X traces (deviceProperties `name` empty, 8 devices listed, kernels on device 2), and the H200, H100 and
A100 rows of other real traces with their names taken away."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FOREIGN, H200

from traceinsight.ingest import load
from traceinsight.model.attach import attach
from traceinsight.model.gpus import gpu_for, match_gpu_by_properties
from traceinsight.queries import sql

TRACELENS = Path(__file__).parent / "data" / "foreign" / "tracelens"
VLLM = TRACELENS / "vllm_mi300x_gptoss_decode_graph_execution.json.gz"


def _device_rows(path: Path) -> list[dict[str, Any]]:
    db, ids = load([path], cache=False)
    return db.rows("SELECT * FROM devices WHERE trace_id = $t ORDER BY device_id", {"t": ids[0]})


def _unnamed(path: Path) -> dict[str, Any]:
    row = _device_rows(path)[0]
    return {**row, "name": ""}


def test_vllm_mi300x_unnamed_devices_are_an_mi300x() -> None:
    db, ids = load([VLLM], cache=False)
    t = ids[0]
    rows = db.rows("SELECT * FROM devices WHERE trace_id = $t ORDER BY device_id", {"t": t})
    assert len(rows) == 8 and {r["name"] for r in rows} == {""}
    assert {(r["num_sms"], r["compute_major"], r["compute_minor"], r["total_mem_bytes"]) for r in rows} == {
        (304, 9, 4, 206141652992)}
    gpu_row = db.rows(sql("trace_gpu"), {"trace": t})[0]
    assert (gpu_row["device_id"], gpu_row["name"], gpu_row["num_sms"]) == (2, "", 304)
    sched = attach(db, t, [], gpu_row)
    assert sched.gpu is not None
    assert (sched.gpu.key, sched.gpu.name, sched.gpu.identified_by) == ("mi300x", "AMD Instinct MI300X", "properties")
    assert sched.gpu.hbm_bandwidth_bytes_per_s == 5.3e12  # the table's, which the architecture's defaults lack
    assert any("GPU identified as AMD Instinct MI300X from compute capability 9.4, 304 SMs and 192 GiB" in n
               for n in sched.notes)


@pytest.mark.parametrize(("path", "key"), [
    (H200 / "flashinfer_decode_sweep.pt.trace.json.gz", "h200"),  # cc 9.0, 132 SMs, 140 GiB
    (FOREIGN / "tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "h100-sxm"),  # cc 9.0, 132 SMs, 79 GiB
    (FOREIGN / "hta_a100_alexnet_critical_path_trace.json.gz", "a100-40gb"),  # cc 8.0, 108 SMs, 39 GiB
    (H200 / "flashinfer_decode.sqlite", "h200"),  # Nsight Systems' TARGET_INFO_GPU row
    (TRACELENS / "sglang_mi300x_Qwen3-8B_decode.json.gz", "mi300x"),
])
def test_real_device_rows_without_their_names(path: Path, key: str) -> None:
    row = _unnamed(path)
    gpu = gpu_for(row["name"], {k: v for k, v in row.items() if k != "name"})
    assert (gpu.key, gpu.identified_by) == (key, "properties")
    assert gpu.num_sms == row["num_sms"]
    # An unknown name is no better than none.
    assert gpu_for("NVIDIA Graphics Device", {k: v for k, v in row.items() if k != "name"}).key == key


def test_hopper_without_memory_is_not_guessed() -> None:
    # cc 9.0 with 132 SMs is an H200, an H100 SXM, an H100 NVL or an H800: without a memory size, none is chosen.
    row = _unnamed(H200 / "flashinfer_decode_sweep.pt.trace.json.gz")
    row.pop("total_mem_bytes")
    gpu = gpu_for("", row)
    assert (gpu.key, gpu.identified_by, gpu.num_sms, gpu.hbm_bandwidth_bytes_per_s) == (
        "custom", "architecture", 132, None)
    assert match_gpu_by_properties((9, 0), 132) is None


def test_memory_chooses_among_one_architecture() -> None:
    gib = 2**30
    assert match_gpu_by_properties((9, 4), 304, 64, 192 * gib).key == "mi300x"  # type: ignore[union-attr]
    assert match_gpu_by_properties((9, 4), 304, 64, 256 * gib).key == "mi325x"  # type: ignore[union-attr]
    assert match_gpu_by_properties((9, 0), 132, 32, 94 * gib).key == "h100-nvl"  # type: ignore[union-attr]
    assert match_gpu_by_properties((9, 0), 132, 32, 500 * gib) is None  # nothing that large
    # One entry of its kind: its properties are enough (a B200 row with its name taken away).
    assert match_gpu_by_properties((10, 0), 148).key == "b200"  # type: ignore[union-attr]
    # The warp size keeps AMD's gfx90a (cc 9.0, 64 lanes) apart from NVIDIA's Hopper.
    assert match_gpu_by_properties((9, 0), 104, 64).key == "mi210"  # type: ignore[union-attr]
    assert match_gpu_by_properties((9, 0), 104, 32) is None


def test_kernels_on_an_undescribed_id_use_identical_device_rows() -> None:
    # The vLLM trace's eight identical rows (ids 0..7) with the kernels moved to device 9: one GPU model, so its
    # properties serve; with the rows made different, nothing is guessed (tests/test_trace_gpu_fallback.py).
    db, ids = load([VLLM], cache=False)
    t = ids[0]
    db.sql("UPDATE kernel_rows SET device_id = 9 WHERE trace_id = $t", {"t": t})
    gpu_row = db.rows(sql("trace_gpu"), {"trace": t})[0]
    assert (gpu_row["device_id"], gpu_row["num_sms"], gpu_row["compute_major"]) == (9, 304, 9)
    sched = attach(db, t, [], gpu_row)
    assert sched.gpu is not None and sched.gpu.key == "mi300x"
    db.sql("UPDATE devices SET total_mem_bytes = 1 WHERE trace_id = $t AND device_id = 3", {"t": t})
    gpu_row = db.rows(sql("trace_gpu"), {"trace": t})[0]
    assert (gpu_row["device_id"], gpu_row["num_sms"]) == (9, None)
    assert attach(db, t, [], gpu_row).gpu is None


def test_named_devices_keep_their_table_entry() -> None:
    with gzip.open(TRACELENS.parent / "tracelens_kernel_times.json.gz", "rt", encoding="utf-8") as fh:
        named = [t["device_properties"] for t in json.load(fh) if t["device_properties"].get("name")]
    assert named
    for p in named:
        assert gpu_for(p["name"], p).identified_by == "name"
