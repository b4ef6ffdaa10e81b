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

Note: the names `simulate` and `plan` here are the functions; import from submodules explicitly
(`from traceinsight.model.simulate import SimResult`), not as attributes of this package.
"""

from traceinsight.model.calibration import (
    DEFAULT_SHAPES,
    GENERIC_SHAPE,
    H200_COSTS,
    Shape,
    calibrate,
    cost_model,
    default_cost,
)
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

__all__ = [
    "BACKENDS",
    "CUDA_CORE",
    "DEFAULT_SHAPES",
    "FA2",
    "FA3",
    "GENERIC_SHAPE",
    "GPU",
    "H200_COSTS",
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
