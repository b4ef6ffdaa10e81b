"""The whole analysis, stage after stage: ingest -> labels -> model (steps, schedule) -> diagnose. The CLI and
the dashboard both call `analyze` and only render what it returns."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.run import diagnose
from traceinsight.ingest import load
from traceinsight.ingest.host_ops import HostOp
from traceinsight.ingest.store import TraceDB
from traceinsight.model.attach import attach
from traceinsight.model.breakdown import breakdowns
from traceinsight.model.kernel_table import ensure_labels
from traceinsight.model.steps import STEPS_FROM, group_steps, step_kernels
from traceinsight.queries import sql
from traceinsight.tuning import gc_paused

# Per kernel name, the spread of its durations as `nsys stats` gives it (median; standard deviation of the sample,
# 0 for one execution) and its 90th and 99th percentiles (interpolated, as the median), in ns, beside the
# count/total/mean/min/max of queries/kernel_summary.sql.
KERNEL_SPREAD_SQL = """
SELECT name, CAST(round(median(dur_ns)) AS BIGINT) AS median_ns,
       CAST(round(quantile_cont(dur_ns, 0.9)) AS BIGINT) AS p90_ns,
       CAST(round(quantile_cont(dur_ns, 0.99)) AS BIGINT) AS p99_ns,
       CAST(round(coalesce(stddev_samp(dur_ns), 0)) AS BIGINT) AS stddev_ns
FROM kernels WHERE trace_id = $trace GROUP BY name
"""


def analyze_trace(
    db: TraceDB,
    trace_id: int,
    step_pattern: str | None = None,
    model: bool = True,
    limits: dict[str, float] | None = None,
    diagnostics: bool = True,
) -> TraceAnalysis:
    """Analyze one trace already in `db`: steps, then (unless `model` is False) the schedule model and (unless
    `diagnostics` is False) the diagnostics, whose thresholds `limits` may override ('rule-id.NAME': value)."""
    with gc_paused():
        return _analyze_trace(db, trace_id, step_pattern, model, limits, diagnostics)


def _analyze_trace(db: TraceDB, trace_id: int, step_pattern: str | None, model: bool,
                   limits: dict[str, float] | None, diagnostics: bool) -> TraceAnalysis:
    ensure_labels(db)
    meta = db.rows("SELECT * FROM traces WHERE trace_id = $t", {"t": trace_id})[0]
    gpu_rows = db.rows(sql("trace_gpu"), {"trace": trace_id})
    gpu = gpu_rows[0] if gpu_rows else {}
    kernels = db.rows(sql("kernel_summary"), {"trace": trace_id})
    spread = {r["name"]: r for r in db.rows(KERNEL_SPREAD_SQL, {"trace": trace_id})}
    for k in kernels:
        k["params"] = json.loads(k.pop("params_json") or "{}")
        k["share"] = float(k["share"] or 0.0)
        s = spread.get(k["name"]) or {}
        for col in ("median_ns", "p90_ns", "p99_ns", "stddev_ns"):
            k[col] = s.get(col)
    families = db.rows(sql("family_summary"), {"trace": trace_id})
    for f in families:
        f["share"] = float(f["share"] or 0.0)
    db.fit_memory()  # before each stage: DuckDB's share is what the analysis's objects leave of its budget
    steps, unassigned = group_steps(db, trace_id, step_pattern)
    analysis = TraceAnalysis(
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
        steps=steps,
        limits=dict(limits or {}),
    )
    if meta["format"] == "ncu-csv" and not kernels:
        n = db.rows("SELECT count(*) AS n FROM ncu_kernels WHERE trace_id = $t", {"t": trace_id})[0]["n"]
        analysis.warnings.append(
            f"an Nsight Compute CSV ({n} profiled kernel{'s' if n != 1 else ''}) holds per-kernel metrics, not a "
            "timeline: give it with --ncu beside a trace of the same run (traceinsight analyze TRACE --ncu "
            f"{Path(meta['path']).name})")
    if meta["format"] in ("sidecar", "flashinfer-log"):
        what = ("a sidecar (each step's batch composition)" if meta["format"] == "sidecar"
                else "a FlashInfer API log (the batches of its plan() calls)")
        analysis.warnings.append(
            f"{what}, not a trace: give it with --meta beside the trace it describes (traceinsight analyze TRACE "
            f"--meta {Path(meta['path']).name})")
    if steps:
        analysis.extra["steps_from"] = STEPS_FROM[steps[0].evidence]
    analysis.host_ops = _host_ops_reader(db, trace_id)
    analysis.step_kernels = lambda step: step_kernels(db, trace_id, step)
    analysis.cursor = db.con.cursor
    if unassigned:
        # Attention launches outside every annotated step (warm-ups, planning runs): counted, not steps.
        analysis.extra["unassigned_launches"] = {
            "count": len(unassigned),
            "attention_ns": sum(x.dur_ns for x in unassigned),
        }
    if model:
        db.fit_memory()
        analysis.schedule = attach(db, trace_id, steps, gpu)
        analysis.warnings.extend(analysis.schedule.warnings)
    db.fit_memory()
    # After the model: a sidecar's query lengths may have changed launch phases (prefill work is its own part).
    breakdowns(db, trace_id, steps)
    if model:
        if diagnostics:
            db.fit_memory()
            analysis.findings = diagnose(analysis)
    return analysis


def _host_ops_reader(db: TraceDB, trace_id: int) -> Callable[[list[tuple[int, int]]], list[HostOp]]:
    """What the host did within time windows: the trace's CPU ranges, then its host operations (Kineto CPU ops,
    stored at ingest: the trace file is not read again), as queries/host_ops.sql gives them. Windows that touch
    or overlap are read as one."""

    def read(windows: list[tuple[int, int]]) -> list[HostOp]:
        merged: list[list[int]] = []
        for lo, hi in sorted(windows):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        if not merged:
            return []
        rows = db.sql(sql("host_ops"), {"trace": trace_id, "lo": [w[0] for w in merged],
                                        "hi": [w[1] for w in merged]}).fetchall()
        return [HostOp(*r) for r in rows]

    return read


def analyze(
    paths: list[Path],
    meta: list[Path] | None = None,
    ncu: list[Path] | None = None,
    step_pattern: str | None = None,
    db: TraceDB | None = None,
    model: bool = True,
    limits: dict[str, float] | None = None,
    diagnostics: bool = True,
    cache: bool | None = None,
) -> tuple[TraceDB, list[TraceAnalysis]]:
    """Ingest `paths` (each its own trace; sidecars and ncu CSVs attach to the first) and analyze each
    (`model` False: steps only, no schedule model and no findings; `diagnostics` False: no findings; `cache`:
    see `traceinsight.ingest.add_trace`). An input given twice is read once, and a sidecar that matches none of
    the first trace's steps is kept: both are said in that trace's `warnings`."""
    meta, ncu, notes = distinct_inputs(paths, list(meta or []), list(ncu or []))
    # The ingest cache's copy of the files read now is written on a worker thread beside the analysis (ingest.load),
    # joined before this returns: no thread of the library outlives the call.
    db, ids = load(paths, meta=meta, ncu=ncu, db=db, cache=cache, background=True)
    try:
        analyses = _analyze_all(db, ids, meta, notes, step_pattern, model, limits, diagnostics)
    except BaseException:
        db.join_worker(cancel=True)  # an entry half written is discarded
        raise
    db.join_worker()
    return db, analyses


def _analyze_all(db: TraceDB, ids: list[int], meta: list[Path], notes: list[str], step_pattern: str | None,
                 model: bool, limits: dict[str, float] | None, diagnostics: bool) -> list[TraceAnalysis]:
    analyses = [analyze_trace(db, i, step_pattern, model=model, limits=limits, diagnostics=diagnostics) for i in ids]
    if len(analyses) > 1 and model and diagnostics:
        from traceinsight.diagnose.run_rules import attach_runs

        attach_runs(db, analyses)  # the ranks of one distributed run, aligned and judged together
    if analyses:
        first = analyses[0]
        if meta and model and first.steps and first.schedule is not None and not any(
                b.source == "sidecar" for b in first.schedule.batches.values()):
            names = ", ".join(repr(s.name) for s in first.steps[:2])
            which = (f"the sidecar {meta[0]}" if len(meta) == 1
                     else f"none of the sidecars ({', '.join(map(str, meta))})")
            count = f"the {len(first.steps)} steps" if len(first.steps) > 1 else "the one step"
            notes.append(f"{which} matches none of {count} (named like {names}): is it from "
                         "this run? Step batches come from the trace alone")
        first.warnings.extend(n for n in notes if n not in first.warnings)
    return analyses


def _identity(p: Path) -> tuple[int, int] | str:
    try:
        st = p.stat()
        return (st.st_dev, st.st_ino)
    except OSError:
        return str(p)


def distinct_inputs(paths: list[Path], meta: list[Path], ncu: list[Path]) -> tuple[list[Path], list[Path], list[str]]:
    """The sidecars and ncu CSVs without the files given already (as a trace, or before among them: the same file
    read twice doubles every count it adds), and one warning per file left out."""
    seen: dict[tuple[int, int] | str, str] = {_identity(p): "a trace" for p in paths}
    notes: list[str] = []
    kept: dict[str, list[Path]] = {"--meta": [], "--ncu": []}
    for option, files in (("--meta", meta), ("--ncu", ncu)):
        for f in files:
            key = _identity(f)
            if key in seen:
                notes.append(f"{f} is given twice (as {seen[key]} and with {option}): read once")
                continue
            seen[key] = f"{option}"
            kept[option].append(f)
    return kept["--meta"], kept["--ncu"], notes
