"""What the Python API costs against the command on the bundled 27 MB sweep trace: `traceinsight analyze --format
json` (the command tunes its process: traceinsight.tuning) beside `traceinsight.open(...).findings` in a fresh
process left untuned (what a notebook gets) and after `traceinsight.tuning.tune()`. Wall seconds and peak RSS of
each process (imports included), REPEATS runs each, interleaved; the median is reported.

    .venv/bin/python benchmarks/api_cost.py

Writes benchmarks/results/api_cost.json."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "examples" / "h200" / "flashinfer_decode_sweep.pt.trace.json.gz"
META = REPO / "examples" / "h200" / "flashinfer_decode_sweep.meta.json.gz"
RESULTS = REPO / "benchmarks" / "results" / "api_cost.json"
REPEATS = 3
OPEN = f"import traceinsight as ti; a = ti.open({str(TRACE)!r}, meta={str(META)!r}, cache=False); a.findings"
RUNS = {
    "traceinsight analyze --format json (tuned)": [sys.executable, "-m", "traceinsight", "analyze", str(TRACE),
                                                   "--meta", str(META), "--format", "json", "--no-cache"],
    "traceinsight.open + .findings (untuned)": [sys.executable, "-c", OPEN],
    "traceinsight.open + .findings (tune())": [sys.executable, "-c", "import traceinsight.tuning as t; t.tune(); "
                                               + OPEN],
}


def run(cmd: list[str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, cwd=REPO)
    _, status, usage = os.wait4(p.pid, 0)
    if status:
        raise SystemExit(f"{cmd} failed ({status})")
    return time.perf_counter() - t0, usage.ru_maxrss / 1024


def main() -> None:
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in RUNS}
    for _ in range(REPEATS):
        for name, cmd in RUNS.items():
            got[name].append(run(cmd))
    out = {}
    for name, rows in got.items():
        wall = statistics.median(r[0] for r in rows)
        rss = statistics.median(r[1] for r in rows)
        out[name] = {"wall_s": round(wall, 2), "peak_rss_mb": round(rss), "runs": rows}
        print(f"{name:46} {wall:6.2f} s  {rss:6.0f} MB peak RSS  (median of {REPEATS})")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"trace": str(TRACE.relative_to(REPO)), "cores": os.cpu_count(), **out},
                                  indent=1) + "\n")


if __name__ == "__main__":
    main()
