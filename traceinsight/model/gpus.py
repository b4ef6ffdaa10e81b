"""GPU limits the schedule model needs, from the bundled table (`gpus.toml`) and the trace's own device row.

`gpu_for(name, overrides)` picks the table entry whose patterns match the trace's device name (else, for a device
the trace leaves unnamed or names as nothing the table knows, the one its compute capability, SM count and memory
single out: `match_gpu_by_properties`) and lets every property the trace states win over the table. Units: bytes,
bytes per second, counts.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import cache
from importlib import resources
from typing import Any

from traceinsight.errors import TraceInsightError


class UnknownGPUError(TraceInsightError):
    """The device name matches no table entry and the trace does not give enough properties to model it."""


@dataclass(frozen=True)
class GPU:
    """One GPU model's limits (bytes, bytes/s, counts)."""

    key: str  # table id, e.g. 'h200'; 'custom' when built from trace properties alone
    name: str  # display name
    compute_capability: tuple[int, int]
    num_sms: int
    smem_per_sm_bytes: int  # shared memory an SM can give to resident blocks (largest carveout)
    smem_per_block_optin_bytes: int  # largest dynamic + static shared memory one block may opt in to
    reserved_smem_per_block_bytes: int  # driver-reserved shared memory per resident block (1 KB on sm80+)
    max_threads_per_sm: int
    max_blocks_per_sm: int
    max_warps_per_sm: int
    regs_per_sm: int = 65536  # 32-bit registers
    regs_per_block: int = 65536
    max_regs_per_thread: int = 255
    max_threads_per_block: int = 1024
    warp_size: int = 32
    reg_alloc_unit: int = 256  # registers are allocated per warp in multiples of this
    reg_subpartitions: int = 4  # register file sub-partitions (warp allocation granularity)
    smem_alloc_unit: int = 128  # shared memory allocation granularity per block
    hbm_bandwidth_bytes_per_s: float | None = None  # peak DRAM bandwidth; None when unknown
    l2_bytes: int | None = None
    patterns: tuple[str, ...] = ()
    mem_bytes: int | None = None  # device memory as the runtime reports it; tells apart entries of one architecture
    identified_by: str = "name"  # how gpu_for chose it: 'name' | 'properties' | 'architecture' (key 'custom')

    @property
    def warp_alloc_granularity(self) -> int:
        """Warps per SM come in multiples of this (one register-file sub-partition per warp scheduler)."""
        return self.reg_subpartitions

    @property
    def sm_arch(self) -> int:
        """Compute capability as one number: (9, 0) -> 90."""
        return self.compute_capability[0] * 10 + self.compute_capability[1]


# Trace property names (normalized `devices` table columns, Kineto deviceProperties, Nsight Systems
# TARGET_INFO_GPU) -> GPU field.
_OVERRIDE_KEYS: dict[str, str] = {
    "num_sms": "num_sms",
    "numSms": "num_sms",
    "smCount": "num_sms",
    "regs_per_sm": "regs_per_sm",
    "regsPerMultiprocessor": "regs_per_sm",
    "maxRegistersPerSm": "regs_per_sm",
    "regs_per_block": "regs_per_block",
    "regsPerBlock": "regs_per_block",
    "maxRegistersPerBlock": "regs_per_block",
    "smem_per_sm_bytes": "smem_per_sm_bytes",
    "sharedMemPerMultiprocessor": "smem_per_sm_bytes",
    "maxShmemPerSm": "smem_per_sm_bytes",
    "maxSharedMemoryPerMultiProcessor": "smem_per_sm_bytes",  # ROCm's Kineto deviceProperties
    "smem_per_block_optin_bytes": "smem_per_block_optin_bytes",
    "sharedMemPerBlockOptin": "smem_per_block_optin_bytes",
    "maxShmemPerBlockOptin": "smem_per_block_optin_bytes",
    "max_threads_per_sm": "max_threads_per_sm",
    "maxThreadsPerMultiprocessor": "max_threads_per_sm",
    "max_threads_per_block": "max_threads_per_block",
    "maxThreadsPerBlock": "max_threads_per_block",
    "max_blocks_per_sm": "max_blocks_per_sm",
    "maxBlocksPerSm": "max_blocks_per_sm",
    "max_warps_per_sm": "max_warps_per_sm",
    "maxWarpsPerSm": "max_warps_per_sm",
    "warp_size": "warp_size",
    "warpSize": "warp_size",
    "mem_bandwidth_bytes_per_s": "hbm_bandwidth_bytes_per_s",
    "hbm_bandwidth_bytes_per_s": "hbm_bandwidth_bytes_per_s",
    "memoryBandwidth": "hbm_bandwidth_bytes_per_s",
    "l2_bytes": "l2_bytes",
    "l2CacheSize": "l2_bytes",
    "reserved_smem_per_block_bytes": "reserved_smem_per_block_bytes",
}
_MAJOR_KEYS = ("compute_major", "computeMajor", "computeCapabilityMajor")
_SM_KEYS = ("num_sms", "numSms", "smCount")
_WARP_KEYS = ("warp_size", "warpSize", "threadsPerWarp")
_MEM_KEYS = ("total_mem_bytes", "totalGlobalMem", "totalMemory")
# How far a device's memory may be from an entry's mem_bytes for the entry to be it (ECC, carve-outs, VF shares).
MEM_TOLERANCE = 0.15
_MINOR_KEYS = ("compute_minor", "computeMinor", "computeCapabilityMinor")


@cache
def _table() -> dict[str, Any]:
    text = resources.files("traceinsight.model").joinpath("gpus.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def _entry(raw: Mapping[str, Any], defaults: Mapping[str, Any]) -> GPU:
    merged = {**defaults, **raw}
    merged["compute_capability"] = tuple(merged["compute_capability"])
    merged["patterns"] = tuple(merged.get("patterns", ()))
    return GPU(**merged)


@cache
def known_gpus() -> tuple[GPU, ...]:
    """Every GPU in the bundled table, in match order."""
    table = _table()
    return tuple(_entry(raw, table["defaults"]) for raw in table["gpu"])


def gpu_by_key(key: str) -> GPU:
    """The table entry with this key ('h200', 'a100-80gb-sxm', ...)."""
    for gpu in known_gpus():
        if gpu.key == key:
            return gpu
    raise UnknownGPUError(f"{key}: no such GPU in the table (known: {', '.join(g.key for g in known_gpus())})")


def match_gpu(name: str) -> GPU | None:
    """The first table entry whose pattern occurs in `name` (case-insensitive), or None."""
    for gpu in known_gpus():
        if any(re.search(p, name, re.IGNORECASE) for p in gpu.patterns):
            return gpu
    return None


def match_gpu_by_properties(
    cc: tuple[int, int], num_sms: int, warp_size: int | None = None, mem_bytes: int | None = None
) -> GPU | None:
    """The table entry a device is by its properties, for a trace that does not name it (TraceLens' vLLM MI300X
    traces: deviceProperties `name` empty) or names it as nothing in the table: the entries of this compute
    capability, SM (CU) count and warp size; the one there is, else the one whose mem_bytes is within
    MEM_TOLERANCE of `mem_bytes` (cc 9.0 with 132 SMs: H200 with 141 GB, H100 SXM with 80, H100 NVL with 94;
    cc 9.4 with 304 CUs: MI300X with 192 GB, MI325X with 256). None when nothing, or more than one, fits: an H100 SXM
    and an H800 look alike, so does an unnamed 132-SM Hopper without a memory size."""
    same = [g for g in known_gpus() if g.compute_capability == cc and g.num_sms == num_sms
            and (warp_size is None or g.warp_size == warp_size)]

    def fits(g: GPU) -> bool:
        return mem_bytes is not None and g.mem_bytes is not None and abs(g.mem_bytes - mem_bytes) <= (
            MEM_TOLERANCE * mem_bytes)

    if len(same) == 1:
        only = same[0]
        return only if mem_bytes is None or only.mem_bytes is None or fits(only) else None
    chosen = [g for g in same if fits(g)]
    return chosen[0] if len(chosen) == 1 else None


def _arch_defaults(cc: tuple[int, int], warp_size: int = 32) -> dict[str, Any]:
    """Limits of the newest architecture entry not newer than `cc`, among entries of this warp size (AMD's gfx9
    devices report "compute capability" 9.x as NVIDIA's Hopper does, with 64-wide wavefronts)."""
    best: dict[str, Any] | None = None
    for raw in _table()["arch"]:
        if raw.get("warp_size", 32) != warp_size:
            continue
        if tuple(raw["compute_capability"]) <= cc and (
            best is None or tuple(raw["compute_capability"]) > tuple(best["compute_capability"])
        ):
            best = raw
    if best is None:
        raise UnknownGPUError(
            f"compute capability {cc[0]}.{cc[1]} (warp size {warp_size}) is older than any GPU the model knows"
        )
    return {k: v for k, v in best.items() if k != "compute_capability"}


def _first(overrides: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    for k in keys:
        v = overrides.get(k)
        if v is not None:
            return int(v)
    return None


def gpu_for(name: str | None, overrides: Mapping[str, Any] | None = None) -> GPU:
    """The GPU a trace ran on: the table entry matching `name`, with the trace's own properties winning.

    `overrides` is the trace's device row (keys of the normalized `devices` table such as `num_sms`,
    `regs_per_sm`, `smem_per_sm_bytes`, `compute_major`; Kineto's `numSms`, `regsPerMultiprocessor`, ... are
    accepted too). None values are ignored, unknown keys too. A name that matches nothing still works when the
    overrides give `num_sms` and the compute capability (limits then come from the architecture's defaults).
    Raises UnknownGPUError otherwise.
    """
    overrides = overrides or {}
    base = match_gpu(name or "")
    major, minor = _first(overrides, _MAJOR_KEYS), _first(overrides, _MINOR_KEYS)
    sms = _first(overrides, _SM_KEYS)
    if base is None and major is not None and sms is not None:
        base = match_gpu_by_properties((major, minor or 0), sms, _first(overrides, _WARP_KEYS),
                                       _first(overrides, _MEM_KEYS))
        if base is not None:
            base = replace(base, identified_by="properties")
            name = None  # the table's name: the trace's is empty or says nothing the table knows
    changes: dict[str, Any] = {}
    for key, value in overrides.items():
        field_name = _OVERRIDE_KEYS.get(key)
        if field_name is not None and value is not None:
            changes[field_name] = float(value) if field_name == "hbm_bandwidth_bytes_per_s" else int(value)
    if major is not None:
        changes["compute_capability"] = (major, minor or 0)
    if base is None:
        if "num_sms" not in changes or "compute_capability" not in changes:
            raise UnknownGPUError(
                f"{name or '(unnamed GPU)'}: unknown GPU and the trace does not state its SM count and "
                "compute capability"
            )
        table_defaults = _table()["defaults"]
        arch = _arch_defaults(changes["compute_capability"], int(changes.get("warp_size", 32)))
        params: dict[str, Any] = {**table_defaults, **arch}
        params.update(changes)
        params.setdefault("name", name or "unknown GPU")
        params["identified_by"] = "architecture"
        known = {f.name for f in fields(GPU)}
        return GPU(key="custom", **{k: v for k, v in params.items() if k in known and k != "key"})
    if name:
        changes.setdefault("name", name)
    return replace(base, **changes)
