"""How long `traceinsight analyze` takes on the real 27 MB H200 sweep trace, end to end (a fresh process, as a
user runs it, its output to a pipe), next to a peer measured in the same run: a plain
`python -c "json.load(gzip.open(...))"`, which only parses the file. Three floors beside them: `python -c pass` (the
interpreter), the libraries the analysis cannot do without (numpy, duckdb, pyarrow, orjson) and
`python -c "import traceinsight.pipeline"` (the analysis's imports). Machines here are noisy, so
the ratio to the peer is the number to compare across runs.

    .venv/bin/python benchmarks/analyze_speed.py [--runs 5] [--trace PATH]

`analyze` runs this checkout's code (`python -m traceinsight`, the checkout first on PYTHONPATH), cold
(`--no-cache`) and with its cache filled (a cache folder of its own; the threshold under which files are not cached,
4 MB on disk, lowered to 0: the 1.8 MB gzip file is otherwise always read): since the analysis cache
(cli/analysis_cache.py), a cached run renders the report from the analysis tables kept by the first run.
Bytecode is written and compiled before
timing (a $PYTHONDONTWRITEBYTECODE in the environment would otherwise make every run compile every module).
Prints a table and writes benchmarks/results/analyze_speed.json.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO / "examples" / "h200" / "flashinfer_decode_sweep.pt.trace.json.gz"
PEER = "peer: python json.load(gzip.open())"


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.PIPE, env=env)  # text to a pipe, read to its end
    return time.perf_counter() - t0


def cases(trace: Path) -> dict[str, list[str]]:
    py = sys.executable
    analyze = [py, "-m", "traceinsight", "analyze", str(trace)]
    return {
        "floor: python -c pass": [py, "-c", "pass"],
        "floor: import numpy, duckdb, pyarrow(.compute), orjson": [
            py, "-c", "import numpy, duckdb, pyarrow, pyarrow.compute, orjson"],
        "floor: import traceinsight.pipeline": [py, "-c", "import traceinsight.pipeline"],
        "traceinsight analyze (text), cold": [*analyze, "--no-cache"],
        "traceinsight analyze (text), cached": analyze,
        "traceinsight analyze --format json, cold": [*analyze, "--format", "json", "--no-cache"],
        "traceinsight analyze --format json, cached": [*analyze, "--format", "json"],
        PEER: [py, "-c", f"import gzip, json; json.load(gzip.open({str(trace)!r}))"],
    }


def environment(cache_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env["TRACEINSIGHT_CACHE_DIR"] = cache_dir
    env["TRACEINSIGHT_CACHE_MIN_BYTES"] = "0"
    return env


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    args = ap.parse_args()
    commands = cases(args.trace)
    times: dict[str, list[float]] = {name: [] for name in commands}
    compileall.compile_dir(REPO / "traceinsight", quiet=1)
    with tempfile.TemporaryDirectory(prefix="analyze_speed_cache_") as cache_dir:
        env = environment(cache_dir)
        for _ in range(2):  # fills the caches (an analysis is kept the second time), warms the page cache
            timed(commands["traceinsight analyze (text), cached"], env)
        for _ in range(args.runs):  # interleave, so drift hits every case alike
            for name, cmd in commands.items():
                times[name].append(timed(cmd, env))
    peer = statistics.median(times[PEER])
    rows = []
    print(f"{'case':42} {'median s':>9} {'min s':>7} {'x peer':>7}")
    for name, ts in times.items():
        med = statistics.median(ts)
        rows.append({"case": name, "median_s": med, "min_s": min(ts), "runs": ts, "ratio_to_peer": med / peer})
        print(f"{name:42} {med:9.2f} {min(ts):7.2f} {med / peer:7.2f}")
    out = REPO / "benchmarks" / "results" / "analyze_speed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"trace": str(args.trace), "machine": platform.platform(), "cpus": os.cpu_count(),
                               "load_avg": os.getloadavg(), "results": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
