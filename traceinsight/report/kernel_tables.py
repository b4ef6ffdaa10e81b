"""The kernel and split-KV threshold tables as the reports show them, read from the JSON document, and how many
launches the schedule model covers. Times in ns."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

KERNEL_COLUMNS = ("kernel", "family", "backend", "phase", "count", "total", "mean", "max", "share", "grids",
                  "params")


def kernel_rows(doc: dict[str, Any], limit: int | None = 40) -> list[dict[str, Any]]:
    """The labeled kernel table, most GPU time first (ns in total_ns/mean_ns/max_ns)."""
    rows = sorted(doc.get("kernels") or [], key=lambda k: -(k.get("total_ns") or 0))
    return rows if limit is None else rows[:limit]


# A kernel's spread of execution times, as the kernel tables show it (keys `<column>_ns` of the JSON's kernels[]).
SPREAD_COLUMNS = ("median", "p90", "p99", "min", "max", "stddev")


def spread_cells(k: dict[str, Any]) -> list[str]:
    """The kernel's SPREAD_COLUMNS, formatted ('–' where the document predates them)."""
    from traceinsight.units import fmt_ns

    return [fmt_ns(k.get(f"{c}_ns")) if k.get(f"{c}_ns") is not None else "–" for c in SPREAD_COLUMNS]


def grids_text(grids: list[list[int]] | None, limit: int = 3) -> str:
    grids = grids or []
    text = " ".join("(" + ",".join(str(v) for v in g) + ")" for g in grids[:limit])
    return text + (f" +{len(grids) - limit}" if len(grids) > limit else "")


def params_text(params: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (params or {}).items())


# Template parameters that make a kernel's tile shape (FA3/FA2 kBlockM x kBlockN, FlashInfer's CTA tiles).
TILE_PARAMS = ("kBlockM", "kBlockN", "cta_tile_q", "cta_tile_kv", "cta_q", "cta_kv")


def threshold_shape(doc: dict[str, Any], t: dict[str, Any]) -> str:
    """The launch shape a threshold row stands for: the kernel's tile (template parameters) and its resources per
    CTA ('kBlockM=64 kBlockN=128; 256 threads, 255 regs, 147 KiB smem')."""
    params = next((k.get("params") or {} for k in doc.get("kernels") or [] if k.get("name") == t.get("name")), {})
    tile = " ".join(f"{p}={params[p]}" for p in TILE_PARAMS if params.get(p) is not None)
    res = [f"{t['threads_per_block']} threads" if t.get("threads_per_block") else "",
           f"{t['registers_per_thread']} regs" if t.get("registers_per_thread") else "",
           f"{round(t['smem_bytes'] / 1024)} KiB smem" if t.get("smem_bytes") else ""]
    return "; ".join(x for x in (tile, ", ".join(r for r in res if r)) if x)


def threshold_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The split-KV thresholds, one row per kernel x backend x shape (`threshold_shape`, KV heads, occupancy,
    max grid, B_th): template variants of a kernel that launch alike (FA3 with and without a causal mask) are one
    row, with `variants` counting them and `shape` saying what the row stands for."""
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for t in doc.get("thresholds") or []:
        shape = threshold_shape(doc, t)
        key = (t.get("kernel"), t.get("backend"), shape, t.get("kv_heads"), t.get("occupancy"), t.get("max_grid"),
               t.get("b_threshold"))
        if key in rows:
            rows[key]["variants"] += 1
        else:
            rows[key] = {**t, "shape": shape, "variants": 1}
    return list(rows.values())


def model_coverage(doc: dict[str, Any]) -> dict[str, int]:
    """How many attention launches carry a schedule model, by source ('sidecar' / 'trace'), and in all."""
    out: dict[str, int] = defaultdict(int)
    for s in doc.get("steps") or []:
        for x in s["launches"]:
            out["launches"] += 1
            m = x.get("model")
            if isinstance(m, dict):
                out[m.get("source") or "unknown"] += 1
    return dict(out)
