"""Resident CTAs per SM (what `cudaOccupancyMaxActiveBlocksPerMultiprocessor` returns) and split-KV thresholds.

The occupancy arithmetic follows CUDA's `cuda_occupancy.h`: registers are allocated per warp in units of
`reg_alloc_unit` inside each of `reg_subpartitions` register-file partitions, shared memory per block is the
kernel's static + dynamic bytes plus the driver's per-block reservation, rounded up to `smem_alloc_unit`.
"""

from __future__ import annotations

from dataclasses import dataclass

from traceinsight.model.gpus import GPU

# Backend ids (the labeler uses the same strings).
CUDA_CORE = "flashinfer-cuda-core"
FA2 = "flashinfer-fa2"
SM90 = "flashinfer-sm90"
FA3 = "fa3"
BACKENDS = (CUDA_CORE, FA2, SM90, FA3)

# FlashInfer's tensor-core (FA2) planner targets this many CTAs per SM, whatever the occupancy.
FA2_CTAS_PER_SM = 2
# FA3's prepare kernel computes per-request dynamic splits only up to this batch size.
FA3_MAX_DYNAMIC_SPLIT_BATCH = 992


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


@dataclass(frozen=True)
class OccupancyLimits:
    """Resident blocks per SM allowed by each resource; `blocks` is the smallest (0: cannot launch)."""

    blocks: int
    by_registers: int
    by_shared_memory: int
    by_warps: int
    by_blocks: int
    limiter: str  # 'registers' | 'shared_memory' | 'warps' | 'blocks' | 'launch' (does not fit at all)


def occupancy_limits(gpu: GPU, regs_per_thread: int, threads_per_block: int, smem_bytes: int) -> OccupancyLimits:
    """Per-resource residency limits for a kernel with these launch attributes.

    regs_per_thread: registers per thread as the kernel was compiled (0 if unknown: no register limit);
    threads_per_block: block size in threads; smem_bytes: static + dynamic shared memory per block (bytes).
    A GPU with a non-positive warp size or allocation unit gives 0 ('launch'), never a division by zero.
    """
    big = 1 << 30
    if (
        threads_per_block <= 0
        or min(gpu.warp_size, gpu.reg_alloc_unit, gpu.reg_subpartitions, gpu.smem_alloc_unit) <= 0  # divisors
        or threads_per_block > gpu.max_threads_per_block
        or regs_per_thread > gpu.max_regs_per_thread
        or smem_bytes > gpu.smem_per_block_optin_bytes
    ):
        return OccupancyLimits(0, 0, 0, 0, 0, "launch")
    warps = -(-threads_per_block // gpu.warp_size)
    by_warps = min(gpu.max_warps_per_sm // warps, gpu.max_threads_per_sm // (warps * gpu.warp_size))
    by_blocks = gpu.max_blocks_per_sm
    if regs_per_thread > 0:
        regs_per_warp = _round_up(regs_per_thread * gpu.warp_size, gpu.reg_alloc_unit)
        if regs_per_warp * warps > gpu.regs_per_block:
            return OccupancyLimits(0, 0, 0, by_warps, by_blocks, "launch")
        per_partition = gpu.regs_per_sm // gpu.reg_subpartitions
        warps_by_regs = (per_partition // regs_per_warp) * gpu.reg_subpartitions
        by_regs = warps_by_regs // warps
    else:
        by_regs = big
    smem_alloc = _round_up(smem_bytes + gpu.reserved_smem_per_block_bytes, gpu.smem_alloc_unit)
    by_smem = gpu.smem_per_sm_bytes // smem_alloc if smem_alloc > 0 else big
    limits = {"registers": by_regs, "shared_memory": by_smem, "warps": by_warps, "blocks": by_blocks}
    limiter = min(limits, key=lambda k: limits[k])
    return OccupancyLimits(
        blocks=limits[limiter],
        by_registers=by_regs,
        by_shared_memory=by_smem,
        by_warps=by_warps,
        by_blocks=by_blocks,
        limiter=limiter,
    )


def occupancy(gpu: GPU, regs_per_thread: int, threads_per_block: int, smem_bytes: int) -> int:
    """Resident CTAs per SM, like cudaOccupancyMaxActiveBlocksPerMultiprocessor (0: the launch cannot fit).

    Example: FlashInfer's CUDA-core decode kernel on H200 (56 registers, 128 threads, 9216 B) -> 9.
    """
    return occupancy_limits(gpu, regs_per_thread, threads_per_block, smem_bytes).blocks


@dataclass(frozen=True)
class Threshold:
    """Where a backend's planner stops splitting long requests along KV.

    occupancy: resident CTAs per SM the planner assumes; max_grid: the CTA count it aims for;
    b_threshold: smallest batch size at which no request can be split any more, whatever the KV lengths
    (None: the backend never splits).
    """

    occupancy: int
    max_grid: int
    b_threshold: int | None


def threshold(
    backend: str,
    occ: int,
    num_sms: int,
    kv_heads: int,
    cuda_graph: bool = False,
    qo_tiles: int = 1,
    fa3_total_mblocks: int | None = None,
) -> Threshold:
    """Split-KV threshold of `backend` for H_kv = `kv_heads` on a GPU with `num_sms` SMs.

    - flashinfer-cuda-core: max_grid = occ * num_SM. Splitting stops once B * H_kv >= max_grid; a request can
      be split only while H_kv * (B + 1) <= max_grid, so B_th = max_grid // H_kv (= 297 for 1188 / 4).
    - flashinfer-fa2: max_grid = 2 * num_SM, M = max_grid // H_kv work slots per head; splitting needs
      qo_tiles * (B + 1) <= M, so B_th = M // qo_tiles (= 66 for 264 / 4). `occ` is reported, not used.
    - flashinfer-sm90: persistent grid of num_SM CTAs, never splits (b_threshold None).
    - fa3: persistent grid of num_SM CTAs; per-request splits only for B <= 992 (B_th = 993), and none at all
      when the static heuristic returns 1 because H_kv * m-blocks (`fa3_total_mblocks`) >= 0.8 * num_SM.
    `cuda_graph` does not move the threshold (under CUDA graphs the planners still split no request beyond it;
    they only keep the merge kernel on).
    """
    del cuda_graph  # same threshold in both modes (see docstring)
    if kv_heads <= 0 or num_sms <= 0:
        raise ValueError("kv_heads and num_sms must be positive")
    if backend == CUDA_CORE:
        max_grid = occ * num_sms
        return Threshold(occ, max_grid, max_grid // kv_heads)
    if backend == FA2:
        max_grid = FA2_CTAS_PER_SM * num_sms
        return Threshold(occ, max_grid, (max_grid // kv_heads) // max(qo_tiles, 1))
    if backend == SM90:
        return Threshold(occ, num_sms, None)
    if backend == FA3:
        mblocks = fa3_total_mblocks if fa3_total_mblocks is not None else kv_heads
        if mblocks >= 0.8 * num_sms:
            return Threshold(occ, num_sms, None)
        return Threshold(occ, num_sms, FA3_MAX_DYNAMIC_SPLIT_BATCH + 1)
    raise ValueError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
