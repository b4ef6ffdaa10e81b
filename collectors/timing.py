"""Timing mode: the sweep's cases timed with CUDA events, no profiler attached.

Per case: plan, `warmup` untimed runs, then `steps` runs each between two CUDA events (one synchronization at
the end); the JSON keeps every sample and the median, min, 10th and 90th percentile in milliseconds.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from .config import RunConfig
from .runtime import Runtime
from .sidecar import StepRecord
from .sweep import Timed, case_source

TIMING_SCHEMA = "traceinsight.timing/1"


def summarize(samples_ms: list[float]) -> dict[str, float]:
    """median, min, p10, p90 and mean of the samples (milliseconds)."""
    ordered = sorted(samples_ms)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]

    return {"median_ms": statistics.median(ordered), "min_ms": ordered[0], "p10_ms": pct(0.10),
            "p90_ms": pct(0.90), "mean_ms": statistics.fmean(ordered)}


def run_timing(rt: Runtime, cfg: RunConfig) -> tuple[list[StepRecord], Timed]:
    """Time every case; return one sidecar step per case (key without a step token) and the samples."""
    t = rt.torch
    records: list[StepRecord] = []
    times: Timed = []
    for case in case_source(rt, cfg, None):
        for _ in range(cfg.warmup):
            case.run()
        events = [(t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)) for _ in range(cfg.steps)]
        for start, end in events:
            start.record()
            case.run()
            end.record()
        t.cuda.synchronize()
        record = case.record(case.key, cfg.cuda_graph)
        records.append(record)
        times.append((case.key, record, [s.elapsed_time(e) for s, e in events]))
    return records, times


def _fa3_fields(rec: StepRecord) -> dict[str, Any]:
    """FA3 cases add the call and the static and largest per-request split counts."""
    if "call" not in rec.extra:
        return {}
    splits = rec.plan.extra.get("splits") or [None]
    return {"call": rec.extra["call"], "num_splits_static": rec.plan.extra.get("num_splits_static"),
            "max_splits": max(splits)}


def document(cfg: RunConfig, gpu: dict[str, Any], software: dict[str, str], times: Timed) -> dict[str, Any]:
    """The timing JSON: one row per case with its plan, batch shape and the step-time statistics."""
    rows = []
    for key, rec, samples in times:
        rows.append({
            "key": key, "path": rec.path, "backend": rec.backend, "dist": rec.extra.get("dist"),
            "batch_size": len(rec.kv_lens), "total_tokens": sum(rec.kv_lens), "max_kv_len": max(rec.kv_lens),
            "cuda_graph": rec.cuda_graph, "split_kv": rec.plan.split_kv,
            "padded_batch_size": rec.plan.padded_batch_size, "chunk_tokens": rec.plan.chunk_tokens,
            **_fa3_fields(rec), **summarize(samples), "samples_ms": [round(s, 5) for s in samples],
        })
    method = ("CUDA events around each run after warm-up, no profiler" if cfg.kind == "timing"
              else "CUDA events around each annotated sweep step (synchronized after each), no profiler")
    return {"schema": TIMING_SCHEMA, "gpu": gpu, "software": software, "model": cfg.model,
            "method": {"clock": method, "warmup": cfg.warmup if cfg.kind == "timing" else 0,
                       "repeats": cfg.steps}, "cases": rows}


def write(path: Path, doc: dict[str, Any]) -> Path:
    rows = ",\n  ".join(json.dumps(r) for r in doc["cases"])
    head = json.dumps({k: v for k, v in doc.items() if k != "cases"}, indent=1)[:-2].rstrip()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'{head},\n "cases": [\n  {rows}\n ]\n}}\n', encoding="utf-8")
    return path
