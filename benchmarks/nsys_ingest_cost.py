"""The ingest of an Nsight Systems export (what `analyze` reads before its first stage) against a reference
checkout's and against the bare `sqlite3` fetchall of the kernel and runtime tables (issue 28's peer), in one run:
each command a fresh process, the three interleaved `--repeat` times; CPU seconds (user + system, all threads),
wall time and peak RSS from wait4's rusage, and the ingest's CPU seconds on its calling thread (the rest ran on the
reader's worker thread and DuckDB's: on an idle machine its wall time is at least this, or more where it waited
for the worker).

    .venv/bin/python -P benchmarks/nsys_ingest_cost.py EXPORT [--ref /tmp/ref35] [--repeat 2] [--out FILE.json]

The ingest is `traceinsight.ingest.load([EXPORT], cache=False)` after `tuning.tune()`, as `ingest_scale.py` runs
it; the reference's runs with PYTHONPATH set to --ref (its code, this venv).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# The ingest prints the CPU seconds of its calling thread (`time.thread_time`): what the reads and inserts moved to
# other threads (the reader's worker, DuckDB's) is left out: on an idle machine with a core to spare its wall time is
# at least this, more where it waited for the worker (the load of a shared machine stretches every wall time).
INGEST = ("import sys, time; from pathlib import Path; from traceinsight.ingest import load; "
          "from traceinsight.tuning import tune; tune(); load([Path(sys.argv[1])], cache=False); "
          "print('main-thread-cpu', round(time.thread_time(), 2))")
FETCHALL = ("import sqlite3, sys; c = sqlite3.connect(f'file:{sys.argv[1]}?mode=ro&immutable=1', uri=True); "
            "k = c.execute('SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchall(); "
            "r = c.execute('SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME').fetchall()")


def _run(code: str, path: Path, env: dict[str, str]) -> dict[str, float]:
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-P", "-c", code, str(path)], env=env, stdout=subprocess.PIPE, text=True)
    said = p.stdout.read() if p.stdout else ""
    _, status, usage = os.wait4(p.pid, 0)
    run = {"ok": status == 0, "wall_s": round(time.perf_counter() - t0, 2),
           "cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024)}
    for line in said.splitlines():
        if line.startswith("main-thread-cpu "):
            run["main_thread_cpu_s"] = float(line.split()[1])
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export", type=Path)
    ap.add_argument("--ref", type=Path, help="a reference checkout (its code runs with PYTHONPATH set to it)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-peer", action="store_true", help="leave out the fetchall (it holds every row)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    here = {**os.environ, "TRACEINSIGHT_CACHE": "0"}
    here.pop("PYTHONPATH", None)
    cases: dict[str, tuple[str, dict[str, str]]] = {"ingest (this tree)": (INGEST, here)}
    if args.ref:
        cases["ingest (reference)"] = (INGEST, {**here, "PYTHONPATH": str(args.ref)})
    if not args.no_peer:
        cases["sqlite3 fetchall kernel+runtime"] = (FETCHALL, here)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    for _ in range(args.repeat):
        for name, (code, env) in cases.items():
            run = _run(code, args.export, env)
            runs[name].append(run)
            main = f" (main thread {run['main_thread_cpu_s']:.2f})" if "main_thread_cpu_s" in run else ""
            print(f"{name:32} {run['wall_s']:8.2f} s {run['cpu_s']:8.2f} cpu-s{main} {run['peak_rss_mb']:7} MB"
                  f"{'' if run['ok'] else '  FAILED'}  (load {os.getloadavg()[0]:.1f})", flush=True)
    summary: dict[str, Any] = {}
    peer = runs.get("sqlite3 fetchall kernel+runtime")
    for name, got in runs.items():
        cpu = statistics.median(r["cpu_s"] for r in got)
        row: dict[str, Any] = {"cpu_s": cpu, "wall_s": statistics.median(r["wall_s"] for r in got),
                               "peak_rss_mb": max(r["peak_rss_mb"] for r in got)}
        if all("main_thread_cpu_s" in r for r in got):
            row["main_thread_cpu_s"] = statistics.median(r["main_thread_cpu_s"] for r in got)
        if peer:
            row["cpu_over_peer"] = round(cpu / statistics.median(r["cpu_s"] for r in peer), 3)
            row["wall_over_peer"] = round(row["wall_s"] / statistics.median(r["wall_s"] for r in peer), 3)
            if "main_thread_cpu_s" in row:  # the peer runs on one thread: its wall on an idle machine ~ its CPU
                row["main_thread_over_peer_cpu"] = round(
                    row["main_thread_cpu_s"] / statistics.median(r["cpu_s"] for r in peer), 3)
        summary[name] = row
        print(f"{name:32} median {row['cpu_s']:.2f} cpu-s, {row['wall_s']:.2f} s"
              + (f", main thread {row['main_thread_cpu_s']:.2f} cpu-s" if "main_thread_cpu_s" in row else "")
              + (f"; {row['cpu_over_peer']:.2f}x the peer's CPU, {row['wall_over_peer']:.2f}x its wall"
                 if peer else ""))
    if args.out:
        args.out.write_text(json.dumps({"export": str(args.export), "runs": runs, "median": summary}, indent=1)
                            + "\n")


if __name__ == "__main__":
    main()
