"""The whole analysis, stage after stage: ingest -> labels -> model (steps) -> diagnose. The CLI and the
dashboard both call `analyze` and only render what it returns."""

from __future__ import annotations

import json
from pathlib import Path

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.ingest import load
from traceinsight.ingest.store import TraceDB
from traceinsight.model.kernel_table import ensure_labels
from traceinsight.model.steps import build_steps
from traceinsight.queries import sql


def analyze_trace(db: TraceDB, trace_id: int, step_pattern: str | None = None) -> TraceAnalysis:
    """Analyze one trace already in `db`."""
    ensure_labels(db)
    meta = db.rows("SELECT * FROM traces WHERE trace_id = $t", {"t": trace_id})[0]
    gpu_rows = db.rows(sql("trace_gpu"), {"trace": trace_id})
    gpu = gpu_rows[0] if gpu_rows else {}
    kernels = db.rows(sql("kernel_summary"), {"trace": trace_id})
    for k in kernels:
        k["params"] = json.loads(k.pop("params_json") or "{}")
        k["share"] = float(k["share"] or 0.0)
    families = db.rows(sql("family_summary"), {"trace": trace_id})
    for f in families:
        f["share"] = float(f["share"] or 0.0)
    return TraceAnalysis(
        trace_id=trace_id,
        path=meta["path"],
        format=meta["format"],
        format_version=meta["format_version"],
        tool_version=meta["tool_version"],
        gpu=gpu,
        start_ns=meta["start_ns"],
        end_ns=meta["end_ns"],
        warnings=list(meta["warnings"] or []),
        kernels=kernels,
        families=families,
        steps=build_steps(db, trace_id, step_pattern),
    )


def analyze(
    paths: list[Path],
    meta: list[Path] | None = None,
    ncu: list[Path] | None = None,
    step_pattern: str | None = None,
    db: TraceDB | None = None,
) -> tuple[TraceDB, list[TraceAnalysis]]:
    """Ingest `paths` (each its own trace; sidecars and ncu CSVs attach to the first) and analyze each."""
    db, ids = load(paths, meta=meta, ncu=ncu, db=db)
    return db, [analyze_trace(db, i, step_pattern) for i in ids]
