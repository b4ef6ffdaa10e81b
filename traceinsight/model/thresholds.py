"""Occupancy and split-KV threshold of each attention kernel variant, from its launch shape and the GPU."""

from __future__ import annotations

from traceinsight.model.gpus import GPU
from traceinsight.model.occupancy import BACKENDS, CUDA_CORE, FA2, FA3, SM90, occupancy_limits
from traceinsight.model.occupancy import threshold as backend_threshold
from traceinsight.model.schedule import KernelThreshold
from traceinsight.model.steps import Kernel

# Where each backend's grid holds the KV heads (KERNELS.md §1, §2): axis index into (x, y, z).
KV_HEADS_GRID_AXIS: dict[str, int] = {CUDA_CORE: 1, FA2: 2}


def threads_per_block(k: Kernel) -> int:
    x, y, z = k.block
    return max(x, 1) * max(y, 1) * max(z, 1) if any(k.block) else 0


def _grid_kv_heads(k: Kernel) -> tuple[int | None, str | None]:
    axis = KV_HEADS_GRID_AXIS.get(k.backend or "")
    if axis is None or not k.grid[axis]:
        return None, None
    return k.grid[axis], f"grid.{'xyz'[axis]}"


def kernel_threshold(k: Kernel, gpu: GPU, kv_heads_hint: int | None = None) -> KernelThreshold | None:
    """Occupancy, max_grid and B_th of kernel `k` (one launch of the variant) on `gpu`; None for a backend the
    model does not know. kv_heads: from the grid where the backend puts them, else `kv_heads_hint` (sidecar)."""
    backend = k.backend or ""
    if backend not in BACKENDS:
        return None
    threads = threads_per_block(k)
    lim = occupancy_limits(gpu, k.registers_per_thread or 0, threads, k.smem_bytes or 0)
    kv_heads, src = _grid_kv_heads(k)
    if kv_heads is None and kv_heads_hint:
        kv_heads, src = kv_heads_hint, "sidecar"
    if kv_heads is None:
        if backend == SM90:
            t = backend_threshold(backend, lim.blocks, gpu.num_sms, 1)
            return KernelThreshold(k.kernel, k.name, backend, None, None, lim.blocks, lim.limiter, t.max_grid,
                                   None, k.registers_per_thread, threads, k.smem_bytes, gpu.num_sms)
        return KernelThreshold(k.kernel, k.name, backend, None, None, lim.blocks, lim.limiter,
                               gpu.num_sms if backend == FA3 else lim.blocks * gpu.num_sms, None,
                               k.registers_per_thread, threads, k.smem_bytes, gpu.num_sms)
    t = backend_threshold(backend, lim.blocks, gpu.num_sms, kv_heads)
    return KernelThreshold(k.kernel, k.name, backend, kv_heads, src, lim.blocks, lim.limiter, t.max_grid,
                           t.b_threshold, k.registers_per_thread, threads, k.smem_bytes, gpu.num_sms)
