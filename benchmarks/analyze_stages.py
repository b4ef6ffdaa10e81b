"""Where `analyze` spends its time on one trace: wall time, CPU time (the process, all threads) and peak RSS after
each stage of the pipeline (ingest, labels, steps, schedule model, rules) and for the JSON document, in one process.

    .venv/bin/python benchmarks/analyze_stages.py TRACE [--out FILE.json] [--rules]

Memory per row: `peak_rss_mb`, the process's peak so far (rusage); `stage_peak_rss_mb`, the peak within that stage
(/proc sampled every 2 ms); `rss_mb` and `duckdb_mb` after it. `--rules` adds a row per rule inside the rules stage.

For the scale inputs, build them first (`benchmarks/ingest_scale.py --rows 1M --build-only`) and pass e.g.
/tmp/traceinsight-bench/nsys_1M/flashinfer_decode_x.sqlite. The cache is off: every run reads the file.
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

import traceinsight.pipeline as pipeline
from traceinsight.ingest.store import resident_bytes
from traceinsight.report.saved import of_analyses, write_documents
from traceinsight.report.tables import write_tables

STAGES = {"load": "ingest", "ensure_labels": "labels", "group_steps": "steps", "attach": "schedule model",
          "breakdowns": "step breakdown", "diagnose": "rules"}


class _Counting(io.RawIOBase):
    """A sink that counts the bytes written to it (the JSON goes nowhere, as to /dev/null)."""

    def __init__(self) -> None:
        self.bytes = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.bytes += len(b)
        return len(b)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float:
    """Resident memory now (MiB), from /proc (0 where there is none)."""
    return (resident_bytes() or 0) / 2**20


def _duckdb_mb() -> float:
    """What DuckDB's buffer manager holds now (MiB)."""
    db = pipeline.__dict__.get("_stages_db")
    return db.duckdb_bytes() / 2**20 if db is not None else 0.0


def _python_mb() -> float:
    """What Python allocated and still holds (MiB) by tracemalloc, when it traces (--tracemalloc)."""
    return tracemalloc.get_traced_memory()[0] / 2**20 if tracemalloc.is_tracing() else 0.0


class _PeakSampler:
    """The resident memory's peak within each stage: /proc read every 2 ms by a thread (rusage's peak is the
    process's so far, which hides a later stage's own peak under an earlier one)."""

    def __init__(self) -> None:
        self.peak = resident_bytes() or 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, resident_bytes() or 0)
            time.sleep(0.002)

    def restart(self) -> None:
        self.peak = resident_bytes() or 0

    def mb(self) -> int:
        return round(self.peak / 2**20)


def _memory(python_peak: bool = False) -> dict[str, float]:
    """Memory now; `python_peak`: also Python's peak since the last reset (and reset it)."""
    out = {"peak_rss_mb": round(_peak_mb()), "rss_mb": round(_rss_mb()), "duckdb_mb": round(_duckdb_mb())}
    if tracemalloc.is_tracing():
        out["python_mb"] = round(_python_mb())
        if python_peak:
            out["python_peak_mb"] = round(tracemalloc.get_traced_memory()[1] / 2**20)
            tracemalloc.reset_peak()
    return out


_python_peaks: list[int] = []  # rules' peaks, for the rules stage's own


def _top(limit: int = 12) -> list[str]:
    """Where the memory Python still holds was allocated (file:line), largest first."""
    stats = tracemalloc.take_snapshot().statistics("lineno")
    return [f"{s.size / 2**20:8.1f} MiB {s.count:9} blocks  {s.traceback[0].filename.split('/')[-1]}:"
            f"{s.traceback[0].lineno}" for s in stats[:limit]]


def _show(r: dict[str, Any]) -> None:
    """One stage's line on stderr, as soon as it is done (a run stopped for its memory still says how far it got)."""
    print(f"{r['stage']:16} {r['wall_s']:8.2f} s  {r.get('cpu_s', 0):8.2f} cpu-s  peak RSS {r['peak_rss_mb']:6} MB"
          f"  in the stage {r.get('stage_peak_rss_mb', 0):6} MB"
          f"  RSS now {r['rss_mb']:6} MB"
          f"  DuckDB {r['duckdb_mb']:6} MB" + (f"  Python {r['python_mb']:6} MB (peak {r.get('python_peak_mb', '-')})"
                                                if "python_mb" in r else ""),
          file=sys.stderr, flush=True)
    for line in r.get("python_top", []):
        print("    " + line, file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--tracemalloc", action="store_true",
                    help="trace Python's allocations: what it holds after each stage and where (slower)")
    ap.add_argument("--rules", action="store_true", help="also a row for each rule (within the rules stage)")
    ap.add_argument("--no-all-steps", action="store_true",
                    help="skip the --steps all JSON document (every step's row: ~20 GB at 10M kernels)")
    args = ap.parse_args()
    try:  # the process tuned as the command's entry tunes it (older refs tuned in the library)
        from traceinsight.tuning import tune
    except ImportError:
        pass
    else:
        tune()
    sampler = _PeakSampler()
    if args.tracemalloc:
        tracemalloc.start()
    rows: list[dict[str, Any]] = []

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any, **k: Any) -> Any:
            outer = sampler.peak  # a rule's row is inside the rules stage: its peak counts for the stage too
            sampler.restart()
            if args.tracemalloc:  # Python's peak within the stage (a rule's peak counts for the rules stage too)
                outer_python = tracemalloc.get_traced_memory()[1]
                tracemalloc.reset_peak()
            t0, c0 = time.perf_counter(), time.process_time()
            out = fn(*a, **k)
            if name == "load":
                pipeline.__dict__["_stages_db"] = out[0]
            row = {"stage": STAGES.get(name, name), "wall_s": round(time.perf_counter() - t0, 3),
                   "cpu_s": round(time.process_time() - c0, 3), "stage_peak_rss_mb": sampler.mb(), **_memory()}
            sampler.peak = max(outer, sampler.peak) if name.startswith("rule ") else sampler.peak
            if args.tracemalloc:
                peak = tracemalloc.get_traced_memory()[1]
                if name == "diagnose":
                    peak = max([peak, *_python_peaks])
                row["python_peak_mb"] = round(peak / 2**20)
                if name.startswith("rule "):
                    row["python_top"] = _top(6)
                    tracemalloc.reset_peak()
                    # The rules stage's peak: its rules' and its own (reset_peak keeps the current as the peak).
                    _python_peaks.append(max(outer_python, peak))
            if args.tracemalloc and name in ("group_steps", "attach", "breakdowns", "diagnose"):
                row["python_top"] = _top()
            rows.append(row)
            _show(row)
            if args.out:  # so far: a run stopped for its memory keeps the stages it finished
                args.out.write_text(json.dumps({"trace": str(args.trace), "stages": rows}, indent=1) + "\n")
            return out
        return run

    for name in STAGES:  # the pipeline module's own references, so every call is timed
        setattr(pipeline, name, timed(name, getattr(pipeline, name)))
    if args.rules:
        from traceinsight.diagnose import registry

        for r in registry.RULES:
            r.apply = timed(f"rule {r.ID}", r.apply)
    started = time.perf_counter()
    db, analyses = pipeline.analyze([args.trace], cache=False)
    sampler.restart()
    _memory(python_peak=True)  # resets Python's peak
    t0, c0 = time.perf_counter(), time.process_time()
    write_tables(db, analyses)  # what every document is read from (report/saved.py)
    rows.append({"stage": "analysis tables", "wall_s": round(time.perf_counter() - t0, 3),
                 "cpu_s": round(time.process_time() - c0, 3), "stage_peak_rss_mb": sampler.mb(),
                 **_memory(python_peak=True)})
    _show(rows[-1])
    documents = [("JSON document (default: the steps that matter)", "selected"),
                 ("JSON document (--steps all, streamed)", "all")]
    for label, steps in documents[:1] if args.no_all_steps else documents:
        sampler.restart()
        t0, c0 = time.perf_counter(), time.process_time()
        _memory(python_peak=True)  # resets Python's peak
        sink = _Counting()
        write_documents(of_analyses(db.con, analyses), cast(IO[bytes], sink), steps)
        rows.append({"stage": label, "wall_s": round(time.perf_counter() - t0, 3),
                     "cpu_s": round(time.process_time() - c0, 3), "stage_peak_rss_mb": sampler.mb(),
                     **_memory(python_peak=True), "bytes": sink.bytes})
        _show(rows[-1])
    a = analyses[0]
    result = {"trace": str(args.trace), "kernels": sum(k["count"] for k in a.kernels), "steps": len(a.steps),
              "findings": len(a.findings), "total_s": round(time.perf_counter() - started, 3), "stages": rows}
    print(f"{'total':16} {result['total_s']:8.2f} s  ({result['kernels']} kernels, {result['steps']} steps)",
          file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
