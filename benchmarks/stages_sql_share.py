"""How much of each stage after ingest is DuckDB's and how much Python's, on one trace: wall and CPU of the steps,
schedule model, step breakdown and rules stages, and the part spent inside DuckDB (TraceDB.sql/script/rows,
fit_memory, every relation a stage runs, each record batch a stream hands over).

    TRACEINSIGHT_CACHE=0 .venv/bin/python -P benchmarks/stages_sql_share.py TRACE [--repeat N] [--out FILE.json]

The trace is ingested once (cache off); the stages then run N times on it (the steps stage's scratch tables are
made again each time), and each row is the minimum over the runs. CPU is the process's (DuckDB's threads too): a
stage's "python" CPU is its CPU less the CPU of its DuckDB calls. The rules run their queries on cursors of the
analysis's connection (the launch relation): those count as Python here. Where a stage is mostly DuckDB, its time
goes with fewer or cheaper queries, not with less Python per element.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb._seam as seam  # the one call through which a relation runs (this DuckDB build's Python layer)
import pyarrow as pa

import traceinsight.pipeline as pipeline
from traceinsight.diagnose.run import diagnose
from traceinsight.ingest import load
from traceinsight.ingest.store import TraceDB
from traceinsight.model.attach import attach
from traceinsight.model.breakdown import breakdowns
from traceinsight.model.steps import group_steps
from traceinsight.queries import sql

_inside = [0.0, 0.0]  # wall, CPU inside DuckDB so far
_depth = [0]


def _timed(fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*a: Any, **k: Any) -> Any:
        if _depth[0]:
            return fn(*a, **k)
        _depth[0] += 1
        t, c = time.perf_counter(), time.process_time()
        try:
            return fn(*a, **k)
        finally:
            _inside[0] += time.perf_counter() - t
            _inside[1] += time.process_time() - c
            _depth[0] -= 1
    return run


def _instrument() -> None:
    for name in ("sql", "script", "rows", "fit_memory"):
        setattr(TraceDB, name, _timed(getattr(TraceDB, name)))
    seam.submit = _timed(seam.submit)
    stream = TraceDB.stream

    def timed_stream(self: TraceDB, result: Any, batch_rows: int) -> Iterator[pa.RecordBatch]:
        batches = stream(self, result, batch_rows)
        take = _timed(batches.__next__)
        while True:
            try:
                batch = take()
            except StopIteration:
                return
            yield batch

    TraceDB.stream = timed_stream  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    try:  # the process tuned as the command's entry tunes it
        from traceinsight.tuning import tune
    except ImportError:
        pass
    else:
        tune()
    db, ids = load([args.trace], cache=False)
    tid = ids[0]
    _instrument()
    gpu_rows = db.rows(sql("trace_gpu"), {"trace": tid})
    gpu = gpu_rows[0] if gpu_rows else {}
    best: dict[str, dict[str, float]] = {}
    for _ in range(args.repeat):
        a = pipeline.analyze_trace(db, tid, diagnostics=False)  # the analysis the stages below redo
        stages: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [
            ("steps", group_steps, (db, tid)),
            ("schedule model", attach, (db, tid, a.steps, gpu)),
            ("step breakdown", breakdowns, (db, tid, a.steps)),
            ("rules", diagnose, (a,)),
        ]
        for name, run, run_args in stages:
            inside = list(_inside)
            t, c = time.perf_counter(), time.process_time()
            run(*run_args)
            row = {"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
                   "duckdb_wall_s": _inside[0] - inside[0], "duckdb_cpu_s": _inside[1] - inside[1]}
            row["python_cpu_s"] = row["cpu_s"] - row["duckdb_cpu_s"]
            kept = best.setdefault(name, row)
            for key, value in row.items():
                kept[key] = min(kept[key], value)
    print(f"{'stage':16} {'wall':>6} {'cpu':>6} {'duckdb wall':>12} {'duckdb cpu':>11} {'python cpu':>11}")
    for name, r in best.items():
        print(f"{name:16} {r['wall_s']:6.2f} {r['cpu_s']:6.2f} {r['duckdb_wall_s']:12.2f} {r['duckdb_cpu_s']:11.2f} "
              f"{r['python_cpu_s']:11.2f}")
    if args.out:
        rounded = {n: {k: round(v, 3) for k, v in r.items()} for n, r in best.items()}
        args.out.write_text(json.dumps({"trace": str(args.trace), "repeat": args.repeat, "stages": rounded},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
