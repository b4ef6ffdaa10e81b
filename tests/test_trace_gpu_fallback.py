"""Kernels on a device id that the trace does not describe use the trace's only described GPU (issue 15, item 3).

Real case: TraceLens' SGLang MI300X decode trace (tests/data/foreign/tracelens/) runs every kernel on device 9 and
holds deviceProperties for id 0 only (an 'AMD Instinct MI300X', 304 CUs). With two described GPUs and kernels on a
third id nothing is guessed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from traceinsight.ingest import TraceDB, load
from traceinsight.model.attach import _device_row
from traceinsight.queries import sql

SGLANG = Path(__file__).parent / "data" / "foreign" / "tracelens" / "sglang_mi300x_Qwen3-8B_decode.json.gz"


def test_sglang_mi300x_kernels_on_device_9_use_the_described_mi300x() -> None:
    db, ids = load([SGLANG], cache=False)
    t = ids[0]
    assert db.rows("SELECT DISTINCT device_id FROM kernels WHERE trace_id = $t", {"t": t}) == [{"device_id": 9}]
    assert [r["device_id"] for r in db.rows("SELECT device_id FROM devices WHERE trace_id = $t", {"t": t})] == [0]
    gpu_row = db.rows(sql("trace_gpu"), {"trace": t})[0]
    assert (gpu_row["device_id"], gpu_row["name"], gpu_row["num_sms"], gpu_row["compute_major"]) == (
        9, "AMD Instinct MI300X", 304, 9)
    dev = _device_row(db, t, gpu_row)
    assert (dev["device_id"], dev["name"], dev["warp_size"], dev["regs_per_block"]) == (9, "AMD Instinct MI300X", 64,
                                                                                          131072)


def test_analyze_names_the_gpu_and_models_it() -> None:
    out = subprocess.run([sys.executable, "-m", "traceinsight", "analyze", str(SGLANG), "--format", "json"],
                         capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert doc["trace"]["gpu"] == {"name": "AMD Instinct MI300X", "num_sms": 304, "device_id": 9,
                                   "compute_capability": "9.4"}
    assert doc["model"]["gpu"]["key"] == "mi300x"
    assert not any("unknown GPU" in note for note in doc["model"]["notes"])


def _db_with_devices(device_ids: list[int], kernel_device: int) -> TraceDB:
    db = TraceDB()
    db.sql("INSERT INTO traces (trace_id, path, format) VALUES (0, 'inline', 'kineto')")
    for d in device_ids:
        db.sql("INSERT INTO devices (trace_id, device_id, name, num_sms) VALUES (0, $d, 'GPU ' || $d, 100 + $d)",
               {"d": d})
    db.sql("INSERT INTO kernel_rows (trace_id, kernel_id, name_id, device_id, stream_id, start_ns, end_ns, dur_ns) "
           "VALUES (0, 0, $n, $d, 7, 0, 10, 10)", {"d": kernel_device, "n": db.name_id(0, "k")})
    return db


def test_two_described_gpus_and_kernels_elsewhere_stay_unknown() -> None:
    db = _db_with_devices([0, 1], kernel_device=5)
    gpu_row = db.rows(sql("trace_gpu"), {"trace": 0})[0]
    assert (gpu_row["device_id"], gpu_row["name"]) == (5, None)
    assert _device_row(db, 0, gpu_row).get("name") is None


def test_kernels_on_a_described_gpu_keep_its_own_row() -> None:
    db = _db_with_devices([0, 1], kernel_device=1)
    gpu_row = db.rows(sql("trace_gpu"), {"trace": 0})[0]
    assert (gpu_row["device_id"], gpu_row["name"], gpu_row["num_sms"]) == (1, "GPU 1", 101)
    assert _device_row(db, 0, gpu_row)["name"] == "GPU 1"
