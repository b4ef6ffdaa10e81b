"""The schedule model: GPU limits, occupancy, each backend's planner, and a CTA -> SM simulator.

Pure functions over plain data (no trace I/O here). The stable API:

- `gpu_for(name, overrides) -> GPU`: the GPU a trace ran on; the trace's device properties win over the table.
- `occupancy(gpu, regs_per_thread, threads_per_block, smem_bytes) -> int`: resident CTAs per SM.
- `threshold(backend, occ, num_sms, kv_heads, cuda_graph=False) -> Threshold(occupancy, max_grid, b_threshold)`.
- `plan(backend, batch, gpu, occ, cuda_graph=False) -> Plan` for backend ids 'flashinfer-cuda-core',
  'flashinfer-fa2', 'flashinfer-sm90', 'fa3'; `Batch(kv_lens, page_size, qo_heads, kv_heads, head_dim)`.
- `simulate(plan, gpu, occ, cost) -> SimResult` (predicted_ns, sm_busy_ns, sm_idle_fraction, tail_ns,
  tail_items, segments).
- `calibrate(samples=[(plan, measured_ns)], gpu, occ) -> CostModel`; `default_cost(backend, gpu)` when no
  launch of the trace can be used to calibrate.
"""

from traceinsight.model.calibrate import DEFAULT_SHAPES, GENERIC_SHAPE, Shape, calibrate, cost_model
from traceinsight.model.gpus import GPU, UnknownGPUError, gpu_by_key, gpu_for, known_gpus
from traceinsight.model.occupancy import (
    BACKENDS,
    CUDA_CORE,
    FA2,
    FA3,
    SM90,
    OccupancyLimits,
    Threshold,
    occupancy,
    occupancy_limits,
    threshold,
)
from traceinsight.model.planners import Batch, FA3Options, Plan, WorkItem, plan
from traceinsight.model.simulate import CostModel, Segment, SimResult, simulate


def default_cost(backend: str, gpu: GPU) -> CostModel:
    """An uncalibrated CostModel for `backend` on `gpu`: the backend's default shape with the SM rate
    measured on an H200 (tokens/ns), scaled by the GPU's HBM bandwidth relative to the H200's 4.8 TB/s.

    Use `calibrate` with launches of the trace itself whenever there are some; this is a fallback.
    """
    h200_sm_rate = {CUDA_CORE: 0.0240, FA2: 0.143, SM90: 0.074, FA3: 0.074}
    scale = (gpu.hbm_bandwidth_bytes_per_s or 4.8e12) / 4.8e12 * 132 / gpu.num_sms
    return cost_model(DEFAULT_SHAPES.get(backend, GENERIC_SHAPE), h200_sm_rate.get(backend, 0.03) * scale, 5000.0,
                      gpu.num_sms)


__all__ = [
    "BACKENDS",
    "CUDA_CORE",
    "DEFAULT_SHAPES",
    "FA2",
    "FA3",
    "GENERIC_SHAPE",
    "GPU",
    "SM90",
    "Batch",
    "CostModel",
    "FA3Options",
    "OccupancyLimits",
    "Plan",
    "Segment",
    "Shape",
    "SimResult",
    "Threshold",
    "UnknownGPUError",
    "WorkItem",
    "calibrate",
    "cost_model",
    "default_cost",
    "gpu_by_key",
    "gpu_for",
    "known_gpus",
    "occupancy",
    "occupancy_limits",
    "plan",
    "simulate",
    "threshold",
]
