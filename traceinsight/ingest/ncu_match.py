"""Which trace kernel each Nsight Compute kernel measured: same kernel (a name key ncu, nsys and Kineto agree on),
grid, block, NVTX range and order."""

from __future__ import annotations

from traceinsight.ingest.store import TraceDB
from traceinsight.queries import sql


def match(db: TraceDB, trace_id: int) -> int:
    """Set `ncu_kernels.kernel_id` for the ncu rows attached to `trace_id`; return how many were matched. The key
    (a kernel name key ncu, nsys and Kineto agree on, grid, block, enclosing NVTX range, order) is documented in
    queries/ncu_match.sql."""
    params = {"trace": trace_id}
    db.sql("UPDATE ncu_kernels SET kernel_id = NULL WHERE trace_id = $trace", params)
    db.sql(sql("ncu_match"), params)
    row = db.rows("SELECT count(kernel_id) AS n FROM ncu_kernels WHERE trace_id = $trace", params)
    return int(row[0]["n"])
