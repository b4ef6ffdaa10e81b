"""The planners of each decode-attention backend, as pure functions of the batch, the GPU and occupancy.

`plan(backend, batch, gpu, occ, cuda_graph)` dispatches on the backend id (the labeler's strings).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from traceinsight.model.gpus import GPU
from traceinsight.model.occupancy import BACKENDS, CUDA_CORE, FA2, FA3, SM90
from traceinsight.model.planners.fa3 import FA3Options, num_splits_heuristic, plan_fa3
from traceinsight.model.planners.flashinfer_cuda_core import plan_cuda_core
from traceinsight.model.planners.flashinfer_fa2 import plan_fa2
from traceinsight.model.planners.flashinfer_sm90 import plan_sm90
from traceinsight.model.planners.types import Batch, Plan, WorkItem, gc_paused

PLANNERS: dict[str, Callable[..., Plan]] = {
    CUDA_CORE: plan_cuda_core,
    FA2: plan_fa2,
    SM90: plan_sm90,
    FA3: plan_fa3,
}


def plan(backend: str, batch: Batch, gpu: GPU, occ: int, cuda_graph: bool = False, **options: Any) -> Plan:
    """Plan one launch of `backend` for `batch` on `gpu` with `occ` resident CTAs per SM.

    backend: 'flashinfer-cuda-core' | 'flashinfer-fa2' | 'flashinfer-sm90' | 'fa3'.
    options: backend-specific knobs (fa3: the fields of FA3Options, e.g. block_m=64, variant='fork').
    Raises ValueError for an unknown backend.
    """
    try:
        planner = PLANNERS[backend]
    except KeyError:
        raise ValueError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})") from None
    if backend == FA3:
        fa3_options = FA3Options(**options) if options else None
        with gc_paused():
            return plan_fa3(batch, gpu, occ, cuda_graph, fa3_options)
    if options:
        raise ValueError(f"backend {backend!r} takes no options (got {', '.join(options)})")
    with gc_paused():
        return planner(batch, gpu, occ, cuda_graph)


__all__ = [
    "PLANNERS",
    "Batch",
    "FA3Options",
    "Plan",
    "WorkItem",
    "num_splits_heuristic",
    "plan",
    "plan_cuda_core",
    "plan_fa2",
    "plan_fa3",
    "plan_sm90",
]
