"""The GPU table beyond Hopper (issue 15): AMD Instinct (CUs, 64-lane waves, LDS, VGPRs), Blackwell, Ada, Ampere parts.

Checked against the deviceProperties of real traces (TraceLens' MI300X, MI210, B200 and H100 traces, kept in
tests/data/foreign/tracelens_kernel_times.json.gz) and against ROCm's published CDNA limits restated in gpus.toml.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from traceinsight.model import UnknownGPUError, gpu_by_key, gpu_for, occupancy_limits

DATA = Path(__file__).parent / "data" / "foreign"


def _props() -> dict[str, dict[str, Any]]:
    """deviceProperties[0] of each TraceLens trace, by path."""
    with gzip.open(DATA / "tracelens_kernel_times.json.gz", "rt", encoding="utf-8") as fh:
        return {t["path"]: t["device_properties"] for t in json.load(fh)}


@pytest.mark.parametrize(("path", "key"), [
    ("tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz", "mi300x"),
    ("tests/traces/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "mi300x"),  # "AMD Instinct MI300X VF"
    ("tests/traces/mi210/gpu_only_trace/gpu_only_trace.json.gz", "mi210"),
    ("tests/traces/b200/eager_trace.json.gz", "b200"),
    ("tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "h100-sxm"),
])
def test_table_agrees_with_real_device_properties(path: str, key: str) -> None:
    p = _props()[path]
    table = gpu_by_key(key)
    gpu = gpu_for(p["name"], p)
    assert gpu.key == key
    assert table.num_sms == p["numSms"]
    assert table.warp_size == p["warpSize"]
    assert table.max_threads_per_sm == p["maxThreadsPerMultiprocessor"]
    assert (table.compute_capability) == (p["computeMajor"], p["computeMinor"])
    lds = p.get("maxSharedMemoryPerMultiProcessor", p.get("sharedMemPerMultiprocessor"))
    assert table.smem_per_sm_bytes == lds


def test_amd_device_without_a_name_gets_cdna_limits() -> None:
    # TraceLens' vLLM MI300X trace has an empty device name: identified from its properties (cc 9.4, 304 CUs, 192 GiB:
    # an MI300X, tests/test_gpu_identity.py), with CDNA3 (gfx942) limits, never Hopper's 228 KB.
    p = _props()["tests/traces/inference/vllm_decode_full/graph_execution.json.gz"]
    assert p["name"] == "" and p["warpSize"] == 64 and (p["computeMajor"], p["computeMinor"]) == (9, 4)
    gpu = gpu_for(p["name"], p)
    assert (gpu.key, gpu.identified_by, gpu.num_sms, gpu.warp_size, gpu.smem_per_sm_bytes) == (
        "mi300x", "properties", 304, 64, 65536)
    assert (gpu.regs_per_sm, gpu.reg_alloc_unit, gpu.max_warps_per_sm) == (131072, 512, 32)
    # Without a memory size it could be an MI325X too: the architecture's limits, as before.
    gpu = gpu_for("", {k: v for k, v in p.items() if k != "totalGlobalMem"})
    assert (gpu.key, gpu.identified_by, gpu.num_sms, gpu.warp_size, gpu.smem_per_sm_bytes) == (
        "custom", "architecture", 304, 64, 65536)
    # A 64-lane device older than any CDNA entry is unknown, not a Volta.
    with pytest.raises(UnknownGPUError, match="warp size 64"):
        gpu_for("some gfx8 part", {"num_sms": 64, "warp_size": 64, "compute_major": 8, "compute_minor": 0})


@pytest.mark.parametrize(("key", "cus", "lds_kib", "tbps"), [
    ("mi300x", 304, 64, 5.3), ("mi325x", 304, 64, 6.0), ("mi355x", 256, 160, 8.0), ("mi210", 104, 64, 1.6),
])
def test_amd_figures(key: str, cus: int, lds_kib: int, tbps: float) -> None:
    # ROCm GPU specifications table (CUs, LDS, VGPR file 512 KiB = 4 SIMDs x 512 VGPRs x 64 lanes x 4 B) and the
    # product datasheets (bandwidth).
    g = gpu_by_key(key)
    assert (g.num_sms, g.smem_per_sm_bytes // 1024, g.warp_size) == (cus, lds_kib, 64)
    assert g.regs_per_sm * 4 == 512 * 1024
    assert g.hbm_bandwidth_bytes_per_s == pytest.approx(tbps * 1e12)


def test_amd_occupancy() -> None:
    """Waves per SIMD from VGPRs: 512 VGPRs per lane per SIMD, granule 8, at most 8 waves per SIMD."""
    g = gpu_by_key("mi300x")
    # 256 threads = 4 waves per workgroup (one per SIMD): 128 VGPRs -> 4 waves/SIMD -> 4 workgroups per CU.
    lim = occupancy_limits(g, regs_per_thread=128, threads_per_block=256, smem_bytes=0)
    assert (lim.by_registers, lim.by_warps, lim.blocks, lim.limiter) == (4, 8, 4, "registers")
    # 90 VGPRs round to 96: 512 // 96 = 5 waves per SIMD -> 5 workgroups.
    assert occupancy_limits(g, regs_per_thread=90, threads_per_block=256, smem_bytes=0).by_registers == 5
    # LDS: 64 KiB per CU, 20 KiB per workgroup -> 3.
    assert occupancy_limits(g, regs_per_thread=32, threads_per_block=256, smem_bytes=20 * 1024).by_shared_memory == 3
    # MI355X's 160 KiB LDS holds 8 such workgroups.
    assert occupancy_limits(gpu_by_key("mi355x"), 32, 256, 20 * 1024).by_shared_memory == 8


@pytest.mark.parametrize(("name", "key", "sms"), [
    ("NVIDIA GB200", "gb200", 152),
    ("NVIDIA B300 SXM6 AC", "b300", 160),
    ("NVIDIA GB300", "b300", 160),
    ("NVIDIA H800", "h800", 132),
    ("NVIDIA H20", "h20", 78),
    ("NVIDIA L40S", "l40s", 142),
    ("NVIDIA L4", "l4", 58),
    ("NVIDIA A10G", "a10g", 80),
    ("NVIDIA GeForce RTX 4090", "rtx-4090", 128),
    ("NVIDIA GeForce RTX 5090", "rtx-5090", 170),
    ("AMD Instinct MI325X", "mi325x", 304),
    ("AMD Instinct MI355X", "mi355x", 256),
])
def test_new_name_patterns(name: str, key: str, sms: int) -> None:
    gpu = gpu_for(name)
    assert (gpu.key, gpu.num_sms) == (key, sms)
    assert gpu.hbm_bandwidth_bytes_per_s and gpu.l2_bytes
