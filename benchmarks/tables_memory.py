"""What writing the analysis tables holds, table by table: one trace analyzed (untraced, so it runs at full
speed), then `report.tables.write_tables` with tracemalloc started after the analysis (so it counts only what the
tables stage allocates) and /proc's RSS sampled every 2 ms. Per table: Python's peak above the stage's start while
its columns are built and while they are inserted, and what it still holds after; RSS's peak above the start.

    .venv/bin/python -P benchmarks/tables_memory.py TRACE [--out FILE.json]
    PYTHONPATH=/tmp/ref38 .venv/bin/python -P benchmarks/tables_memory.py TRACE   # a reference checkout
    ... --slice-rows 24576   # slices of a tenth the rows: a 1M trace's tables in as many slices as 10M's

Builders that yield a table's slices (session 39) are measured slice by slice: the peaks are the largest slice's.

(`benchmarks/analyze_stages.py TRACE --tracemalloc` gives the stage's whole peak with the analysis traced too.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pyarrow as pa

import traceinsight.pipeline as pipeline
import traceinsight.report.tables as tables
from traceinsight.ingest.store import resident_bytes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analyze_stages import _PeakSampler  # noqa: E402

MB = 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--slice-rows", type=int, help="tables.SLICE_ROWS, where the checkout has it (default: the "
                    "module's): a 1M trace's tables in as many slices as the 10M export's at the default (a tenth)")
    args = ap.parse_args()
    if args.slice_rows and hasattr(tables, "SLICE_ROWS"):
        tables.SLICE_ROWS = args.slice_rows
    try:
        from traceinsight.tuning import tune
    except ImportError:
        pass
    else:
        tune()
    db, analyses = pipeline.analyze([args.trace], cache=False)
    sampler = _PeakSampler()
    stats: list[dict[str, Any]] = []

    def built(row: dict[str, Any]) -> None:  # a slice's columns built: their peak and what they hold
        cur, peak = tracemalloc.get_traced_memory()
        row["build_peak_mb"] = max(row["build_peak_mb"], round(peak / MB, 1))
        row["built_mb"] = max(row["built_mb"], round(cur / MB, 1))
        row["slices"] += 1
        tracemalloc.reset_peak()

    def sliced(row: dict[str, Any], slices: Any) -> Any:
        for cols in slices:
            built(row)
            yield cols
            del cols  # not held while the next slice is built
            tracemalloc.reset_peak()  # the insert's peak is the insert's (`_Con`)

    def wrap(name: str, build: Any) -> Any:
        def run(*a: Any, **k: Any) -> Any:
            row = {"table": name, "build_peak_mb": 0.0, "built_mb": 0.0, "slices": 0}
            stats.append(row)
            tracemalloc.reset_peak()
            out = build(*a, **k)
            if isinstance(out, dict):  # a checkout whose builders return the whole table's columns
                built(row)
                return out
            return sliced(row, out)  # a checkout whose builders yield slices of the table
        return run

    for name, build in list(tables.BUILDERS.items()):
        tables.BUILDERS[name] = wrap(name, build)
    con = db.con

    class _Con:  # the inserts' peak: after the build's row, until the next table's build
        def execute(self, sql: str, *a: Any) -> Any:
            rows = sys._getframe(1).f_locals.get("rows")  # noqa: F841 (the caller's table, scanned by name)
            c0 = time.process_time()
            out = con.execute(sql, *a)
            del rows
            if stats and sql.split()[0] in ("INSERT", "CHECKPOINT"):  # the DuckDB side of the table's time
                key = "insert_cpu_s" if sql.startswith("INSERT") else "checkpoint_cpu_s"
                stats[-1][key] = round(stats[-1].get(key, 0) + time.process_time() - c0, 2)
            if sql.startswith("INSERT") and stats:
                cur, peak = tracemalloc.get_traced_memory()
                row = stats[-1]  # the peaks over the table's slices, the rest after its last
                row.update(insert_peak_mb=max(row.get("insert_peak_mb", 0), round(peak / MB, 1)),
                           rss_peak_mb=max(row.get("rss_peak_mb", 0), round((sampler.peak - start_rss) / MB)))
                stats[-1].update(after_mb=round(cur / MB, 1),
                                rss_mb=round(((resident_bytes() or 0) - start_rss) / MB),
                                arrow_mb=round(pa.total_allocated_bytes() / MB),
                                duckdb_mb=round(db.duckdb_bytes() / MB))
                sampler.peak = resident_bytes() or 0  # the next table's own peak
            return out

    start_rss = resident_bytes() or 0
    sampler.peak = start_rss
    tracemalloc.start()
    t0, c0 = time.perf_counter(), time.process_time()
    tables.write_tables_on(_Con(), analyses)
    cur, peak = tracemalloc.get_traced_memory()
    total = {"wall_s": round(time.perf_counter() - t0, 2), "cpu_s": round(time.process_time() - c0, 2),
             "python_peak_above_start_mb": round(max([peak / MB, *(r.get("insert_peak_mb", 0) for r in stats),
                                                      *(r["build_peak_mb"] for r in stats)]), 1),
             "python_after_mb": round(cur / MB, 1), "rss_start_mb": round(start_rss / MB),
             "rss_peak_above_start_mb": max([round((sampler.peak - start_rss) / MB),
                                             *(r.get("rss_peak_mb", 0) for r in stats)])}
    for r in stats:
        print(f"{r['table']:20} build peak {r['build_peak_mb']:7.1f} MB  built {r['built_mb']:7.1f}  insert peak "
              f"{r.get('insert_peak_mb', 0):7.1f}  after {r.get('after_mb', 0):7.1f}  RSS peak in table "
              f"+{r.get('rss_peak_mb', 0)} MB, after +{r.get('rss_mb')}  Arrow {r.get('arrow_mb')}  DuckDB "
              f"{r.get('duckdb_mb')}  insert {r.get('insert_cpu_s', 0)} cpu-s, checkpoint "
              f"{r.get('checkpoint_cpu_s', 0)}",
              file=sys.stderr)
    print(json.dumps(total), file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps({"trace": str(args.trace), "tables": stats, **total}, indent=1) + "\n")


if __name__ == "__main__":
    main()
