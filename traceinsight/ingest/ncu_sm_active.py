"""The measured per-SM load balance of each Nsight Compute kernel (sm__cycles_active.{min,avg,max})."""

from __future__ import annotations

from typing import Any

from traceinsight.ingest.store import TraceDB

SM_ACTIVE_METRICS = ("sm__cycles_active.min", "sm__cycles_active.avg", "sm__cycles_active.max")


def sm_active(db: TraceDB, trace_id: int) -> list[dict[str, Any]]:
    """Per ncu kernel of `trace_id`, in ncu ID order: the measured SM load balance.

    Keys: ncu_id, name, nvtx, grid (x, y, z), kernel_id (matched trace kernel or None), sm_active_min/avg/max
    (cycles an SM was active during the kernel: least busy SM, mean over SMs, busiest SM), sm_active_avg_over_max
    (1.0 = perfectly balanced) and sm_idle_fraction = 1 - avg/max (share of the busiest SM's time the average
    SM sat idle). Values are None when the export lacks the metric.
    """
    rows = db.rows(
        """
        SELECT n.ncu_id, n.name, n.nvtx, n.grid_x, n.grid_y, n.grid_z, n.kernel_id,
               max(m.value) FILTER (WHERE m.metric = 'sm__cycles_active.min') AS sm_active_min,
               max(m.value) FILTER (WHERE m.metric = 'sm__cycles_active.avg') AS sm_active_avg,
               max(m.value) FILTER (WHERE m.metric = 'sm__cycles_active.max') AS sm_active_max
        FROM ncu_kernels n
        LEFT JOIN ncu_metrics m
          ON m.trace_id = n.trace_id AND m.ncu_id = n.ncu_id AND list_contains($metrics, m.metric)
        WHERE n.trace_id = $t
        GROUP BY ALL
        ORDER BY n.ncu_id
        """,
        {"t": trace_id, "metrics": list(SM_ACTIVE_METRICS)},
    )
    out = []
    for r in rows:
        avg, mx = r["sm_active_avg"], r["sm_active_max"]
        ratio = avg / mx if avg is not None and mx else None
        out.append(
            {
                "ncu_id": r["ncu_id"],
                "name": r["name"],
                "nvtx": r["nvtx"],
                "grid": (r["grid_x"], r["grid_y"], r["grid_z"]),
                "kernel_id": r["kernel_id"],
                "sm_active_min": r["sm_active_min"],
                "sm_active_avg": avg,
                "sm_active_max": mx,
                "sm_active_avg_over_max": ratio,
                "sm_idle_fraction": 1.0 - ratio if ratio is not None else None,
            }
        )
    return out
