"""GPU table, occupancy calculator and split-KV thresholds against the real H200 captures.

Facts checked independently: the H200 sweep's `deviceProperties[0]` (zcat | json: numSms 132,
sharedMemPerMultiprocessor 233472, sharedMemPerBlockOptin 232448); its kernels' `registers per thread` /
`block` / `shared memory` args (CUDA-core decode 56 regs, (16,8,1), 9216 B; SM90 168 regs, (384,1,1),
131152 B; FA2 183 regs, (32,1,4), 69632 B); Nsight Compute's launch__occupancy_limit_* columns in
flashinfer_decode.ncu.csv (registers 9 for the decode kernel, 12 for the merge kernel, warps 16, blocks 32);
the foreign traces' device names and SM counts (json / sqlite3 TARGET_INFO_GPU).
"""

from __future__ import annotations

import csv
import gzip
import io
import sqlite3
from pathlib import Path

import orjson
import pytest

from traceinsight.errors import TraceInsightError
from traceinsight.model import (
    CUDA_CORE,
    FA2,
    FA3,
    SM90,
    UnknownGPUError,
    gpu_by_key,
    gpu_for,
    known_gpus,
    occupancy,
    occupancy_limits,
    threshold,
)


def _load(path: Path) -> dict:
    return orjson.loads(gzip.decompress(path.read_bytes()))


def _device_props(path: Path) -> list[dict]:
    return _load(path)["deviceProperties"]


@pytest.fixture(scope="module")
def h200_props(h200: Path) -> dict:
    return _device_props(h200 / "flashinfer_decode_sweep.pt.trace.json.gz")[0]


def test_h200_table_matches_the_trace(h200_props: dict) -> None:
    table = gpu_by_key("h200")
    assert h200_props["name"] == "NVIDIA H200"
    assert table.num_sms == h200_props["numSms"] == 132
    assert table.smem_per_sm_bytes == h200_props["sharedMemPerMultiprocessor"] == 233472
    assert table.smem_per_block_optin_bytes == h200_props["sharedMemPerBlockOptin"] == 232448
    assert table.regs_per_sm == h200_props["regsPerMultiprocessor"] == 65536
    assert table.max_threads_per_sm == h200_props["maxThreadsPerMultiprocessor"] == 2048
    assert gpu_for(h200_props["name"], h200_props) == gpu_by_key("h200")


@pytest.mark.parametrize(
    ("name", "key", "sms"),
    [
        ("NVIDIA H200", "h200", 132),
        ("NVIDIA H20", "h20", 78),
        ("NVIDIA H100 80GB HBM3", "h100-sxm", 132),
        ("NVIDIA H100 PCIe", "h100-pcie", 114),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm", 108),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb", 108),
        ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie", 108),
        ("NVIDIA L40S", "l40s", 142),
        ("NVIDIA B200", "b200", 148),
        ("Tesla V100-DGXS-32GB", "v100", 80),
    ],
)
def test_name_patterns(name: str, key: str, sms: int) -> None:
    gpu = gpu_for(name)
    assert (gpu.key, gpu.num_sms) == (key, sms)
    assert gpu.hbm_bandwidth_bytes_per_s and gpu.hbm_bandwidth_bytes_per_s > 5e11


def test_table_has_the_required_models() -> None:
    keys = {g.key for g in known_gpus()}
    assert {"h100-sxm", "h100-pcie", "h200", "h20", "a100-40gb", "a100-80gb-sxm", "l40s", "b200", "v100"} <= keys
    for g in known_gpus():
        assert g.max_warps_per_sm * g.warp_size == g.max_threads_per_sm
        if g.warp_size == 64:  # AMD Instinct: tests/test_model_gpus_amd.py
            continue
        assert g.max_regs_per_thread == 255 and g.reg_alloc_unit == 256
        assert g.reserved_smem_per_block_bytes == (1024 if g.compute_capability >= (8, 0) else 0)


def test_foreign_trace_devices(foreign: Path) -> None:
    # Kineto deviceProperties of three foreign traces, and nsys TARGET_INFO_GPU rows (checked with sqlite3).
    v100 = _device_props(foreign / "kineto_tbplugin_v100_resnet50_worker0.1623143089861.pt.trace.json.gz")[0]
    assert (gpu_for(v100["name"], v100).key, gpu_for(v100["name"], v100).num_sms) == ("v100", 80)
    h100 = _device_props(foreign / "tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")[0]
    assert gpu_for(h100["name"], h100).key == "h100-sxm"
    a100 = _device_props(foreign / "hta_a100_alexnet_critical_path_trace.json.gz")[0]
    assert a100["name"] == "NVIDIA A100-PG509-200"  # no table pattern but "A100": the 40 GB entry
    assert gpu_for(a100["name"], a100).num_sms == 108
    for db, key, bw in (
        ("fuser_h200_report1.sqlite", "h200", 4916736000000),
        ("pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite", "a100-40gb", 1555200000000),
    ):
        con = sqlite3.connect(f"file:{foreign / db}?mode=ro&immutable=1", uri=True)
        con.row_factory = sqlite3.Row
        row = dict(con.execute("SELECT * FROM TARGET_INFO_GPU").fetchone())
        con.close()
        gpu = gpu_for(row["name"], row)
        assert gpu.key == key
        assert gpu.hbm_bandwidth_bytes_per_s == bw  # the trace's own value wins over the table
        assert gpu.num_sms == row["smCount"]


def test_overrides_win_and_unknown_gpus() -> None:
    assert gpu_for("NVIDIA H200", {"num_sms": 100, "smem_per_sm_bytes": None}).num_sms == 100
    custom = gpu_for("Some Future GPU", {"num_sms": 64, "compute_major": 9, "compute_minor": 0})
    assert custom.key == "custom" and custom.num_sms == 64 and custom.reserved_smem_per_block_bytes == 1024
    with pytest.raises(UnknownGPUError) as err:
        gpu_for("Some Future GPU", {})
    assert isinstance(err.value, TraceInsightError)
    assert str(err.value).startswith("Some Future GPU:")


def test_occupancy_of_the_traced_kernels(h200: Path) -> None:
    gpu = gpu_by_key("h200")
    # One attention launch of each kernel, read from the two sweep traces.
    seen = {}
    for trace in ("flashinfer_decode_sweep.pt.trace.json.gz", "flashinfer_fa2_decode_sweep.pt.trace.json.gz"):
        for e in _load(h200 / trace)["traceEvents"]:
            if e.get("cat") == "kernel" and "flashinfer" in e["name"]:
                a = e["args"]
                key = e["name"].split("<")[0].split("::")[-1]
                threads = a["block"][0] * a["block"][1] * a["block"][2]
                seen[key] = (a["registers per thread"], threads, a["shared memory"])
    assert seen["BatchDecodeWithPagedKVCacheKernel"] == (56, 128, 9216)
    assert occupancy(gpu, *seen["BatchDecodeWithPagedKVCacheKernel"]) == 9
    assert seen["PrefillWithKVCacheKernel"] == (168, 384, 131152)
    assert occupancy(gpu, *seen["PrefillWithKVCacheKernel"]) == 1
    assert seen["BatchPrefillWithPagedKVCacheKernel"] == (183, 128, 69632)
    assert occupancy(gpu, *seen["BatchPrefillWithPagedKVCacheKernel"]) == 2
    assert occupancy(gpu, *seen["PersistentVariableLengthMergeStatesKernel"]) == 12
    lim = occupancy_limits(gpu, 56, 128, 9216)
    assert lim.limiter == "registers" and lim.by_registers == 9
    assert occupancy(gpu, 256, 128, 0) == 0  # more registers than a thread may have
    assert occupancy(gpu, 32, 128, 300_000) == 0  # more shared memory than a block may opt in to


def test_occupancy_matches_nsight_compute(h200: Path) -> None:
    lines = (h200 / "flashinfer_decode.ncu.csv").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))[1:]
    assert len(rows) == 11
    gpu = gpu_by_key("h200")
    for r in rows:
        block = [int(x) for x in r["Block Size"].strip("()").split(",")]
        smem = int(r["launch__shared_mem_per_block_dynamic"].replace(",", "")) + int(
            r["launch__shared_mem_per_block_static"].replace(",", "")
        )
        lim = occupancy_limits(gpu, int(r["launch__registers_per_thread"]), block[0] * block[1] * block[2], smem)
        ncu = {k: int(r[f"launch__occupancy_limit_{k}"]) for k in ("registers", "shared_mem", "warps", "blocks")}
        assert lim.by_registers == ncu["registers"]
        assert lim.by_warps == ncu["warps"] == 16
        assert lim.by_blocks == ncu["blocks"] == 32
        # ncu reports shared memory against the carveout the driver picked (135168 B); ours is the largest.
        assert lim.by_shared_memory >= ncu["shared_mem"]
        assert lim.blocks == min(ncu.values())


def test_thresholds() -> None:
    cc = threshold(CUDA_CORE, 9, 132, 4)
    assert (cc.occupancy, cc.max_grid, cc.b_threshold) == (9, 1188, 297)
    assert threshold(CUDA_CORE, 9, 132, 4, cuda_graph=True) == cc
    fa2 = threshold(FA2, 2, 132, 4)
    assert (fa2.max_grid, fa2.b_threshold) == (264, 66)
    assert threshold(FA2, 2, 132, 1, qo_tiles=2).b_threshold == 132
    assert threshold(SM90, 1, 132, 4).b_threshold is None
    assert threshold(FA3, 1, 132, 4).b_threshold == 993
    assert threshold(FA3, 1, 132, 128).b_threshold is None  # H_kv >= 0.8 * num_SM: never splits
    with pytest.raises(ValueError):
        threshold("triton", 1, 132, 4)


def test_thresholds_agree_with_the_planners_own_decisions(h200: Path) -> None:
    # Every sweep case at or beyond B_th has split_kv == 0; every single-long-request case below it splits.
    for meta_name, tc, th in (
        ("flashinfer_decode_sweep.meta.json.gz", 0, threshold(CUDA_CORE, 9, 132, 4).b_threshold),
        ("flashinfer_fa2_decode_sweep.meta.json.gz", 1, threshold(FA2, 2, 132, 4).b_threshold),
    ):
        meta = _load(h200 / meta_name)
        cases = [c for c in meta["cases"] if c["tc"] == tc]
        assert cases
        for c in cases:
            split = c["plan_info"][-1]
            if c["B"] >= th:
                assert split == 0, c["B"]
            elif c["dist"] in ("skew40", "skew60", "skew80"):
                assert split == 1, (c["dist"], c["B"])
