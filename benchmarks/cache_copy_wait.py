"""How long a cold analysis's calling thread waits for the ingest cache's copy: `pipeline.analyze` of one trace with
the cache on (an empty cache folder of its own), in a fresh process per checkout, the copy timed where it runs on
the calling thread (the reference's `ingest._save`, or `ingest.save` when called there) and the wait in
`TraceDB.join_worker` (this branch: the copy on a worker thread beside the analysis). Wall and the calling thread's
CPU (`time.thread_time`) of each, and of the whole `analyze`.

    .venv/bin/python -P benchmarks/cache_copy_wait.py TRACE [--ref /tmp/ref37] [--repeat 2] [--out F.json]

The machine is shared: compare the waits (what the copy costs the caller) more than the totals.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

_CHILD = """
import json, os, shutil, sys, tempfile, threading, time
from pathlib import Path
folder = tempfile.mkdtemp(prefix="ti-copy-wait-")
os.environ["TRACEINSIGHT_CACHE_DIR"] = folder
import traceinsight.ingest as ingest
from traceinsight.ingest.store import TraceDB
from traceinsight import pipeline
spent = {"copy_wall_s": 0.0, "copy_thread_cpu_s": 0.0, "join_wall_s": 0.0, "join_thread_cpu_s": 0.0}
main = threading.main_thread()

def timed(fn, key):
    def wrapper(*args, **kwargs):
        if threading.current_thread() is not main:
            return fn(*args, **kwargs)
        w, c = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[key + "_wall_s"] += time.perf_counter() - w
            spent[key + "_thread_cpu_s"] += time.thread_time() - c
    return wrapper

for name in ("_save", "save"):  # the reference's, this branch's (on the calling thread only when told)
    if hasattr(ingest, name):
        setattr(ingest, name, timed(getattr(ingest, name), "copy"))
if hasattr(TraceDB, "join_worker"):
    TraceDB.join_worker = timed(TraceDB.join_worker, "join")
try:
    w, c = time.perf_counter(), time.thread_time()
    db, _ = pipeline.analyze([Path(sys.argv[1])], cache=True)
    spent["analyze_wall_s"], spent["analyze_thread_cpu_s"] = time.perf_counter() - w, time.thread_time() - c
    spent["entries"] = len(list((Path(folder) / "db").glob("*.duckdb")))
    db.close()
finally:
    shutil.rmtree(folder)
print(json.dumps(spent))
"""


def _run(trace: Path, pythonpath: str | None) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRACEINSIGHT_CACHE")}
    env["TRACEINSIGHT_CACHE_MIN_BYTES"] = "0"  # small traces too
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run([sys.executable, "-P", "-c", _CHILD, str(trace)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--ref", type=Path, help="a reference checkout (its code runs with PYTHONPATH set to it)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    sides: list[tuple[str, str | None]] = [("this", None)] + ([("ref", str(args.ref))] if args.ref else [])
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in sides}
    for i in range(args.repeat):
        for name, pythonpath in sides if i % 2 == 0 else sides[::-1]:  # interleaved, the order swapped each time
            got = _run(args.trace, pythonpath)
            runs[name].append(got)
            print(f"{name:5} " + "  ".join(f"{k} {v:.2f}" for k, v in got.items()), flush=True)
    summary = {name: {k: statistics.median(r[k] for r in got) for k in got[0]} for name, got in runs.items()}
    for name, s in summary.items():
        print(f"median {name:5} " + "  ".join(f"{k} {v:.2f}" for k, v in s.items()))
    if args.out:
        args.out.write_text(json.dumps({"trace": str(args.trace), "load_average": os.getloadavg(), "runs": runs,
                                        "median": summary}, indent=2) + "\n")


if __name__ == "__main__":
    main()
