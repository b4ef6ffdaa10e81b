"""How long `traceinsight analyze` takes on the real 27 MB H200 sweep trace, end to end (a fresh process, as a
user runs it, its output to a pipe), next to a peer measured in the same run: a plain
`python -c "json.load(gzip.open(...))"`, which only parses the file. Three floors beside them: `python -c pass` (the
interpreter), the libraries the analysis cannot do without (numpy, duckdb, pyarrow, orjson) and
`python -c "import traceinsight.pipeline"` (the analysis's imports). Machines here are noisy, so
the ratio to the peer is the number to compare across runs.

    .venv/bin/python benchmarks/analyze_speed.py [--runs 5] [--trace PATH] [--ref CHECKOUT] [--out FILE]

With `--ref`, the cold analyze cases run from another checkout too (e.g. a clone of an earlier commit), interleaved
with this one's, and the table gives each case's ratio to the ref's.

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
    # text to a pipe, read to its end; from an empty folder, so no module of the working directory shadows one
    subprocess.run(cmd, check=True, stdout=subprocess.PIPE, env=env, cwd=env["ANALYZE_SPEED_CWD"])
    return time.perf_counter() - t0


def cases(trace: Path, ref: Path | None) -> dict[str, tuple[list[str], Path]]:
    """Each case's command and the checkout whose code it runs."""
    py = sys.executable
    analyze = [py, "-m", "traceinsight", "analyze", str(trace)]
    out: dict[str, tuple[list[str], Path]] = {
        "floor: python -c pass": ([py, "-c", "pass"], REPO),
        "floor: import numpy, duckdb, pyarrow, orjson": ([py, "-c", "import numpy, duckdb, pyarrow, orjson"], REPO),
        "floor: import traceinsight.pipeline": ([py, "-c", "import traceinsight.pipeline"], REPO),
        "traceinsight analyze (text), cold": ([*analyze, "--no-cache"], REPO),
        "traceinsight analyze (text), cached": (analyze, REPO),
        "traceinsight analyze --format json, cold": ([*analyze, "--format", "json", "--no-cache"], REPO),
        "traceinsight analyze --format json, cached": ([*analyze, "--format", "json"], REPO),
        PEER: ([py, "-c", f"import gzip, json; json.load(gzip.open({str(trace)!r}))"], REPO),
    }
    if ref is not None:
        out["ref: traceinsight analyze (text), cold"] = ([*analyze, "--no-cache"], ref)
        out["ref: traceinsight analyze --format json, cold"] = ([*analyze, "--format", "json", "--no-cache"], ref)
    return out


def environment(cache_dir: str, tree: Path, cwd: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
    env["TRACEINSIGHT_CACHE_DIR"] = cache_dir
    env["TRACEINSIGHT_CACHE_MIN_BYTES"] = "0"
    env["ANALYZE_SPEED_CWD"] = cwd
    return env


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--ref", type=Path, help="another checkout whose cold analyze runs interleaved with this one's")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "analyze_speed.json")
    args = ap.parse_args()
    ref = args.ref.resolve() if args.ref else None
    commands = cases(args.trace.resolve(), ref)
    times: dict[str, list[float]] = {name: [] for name in commands}
    loads: list[float] = []
    for tree in filter(None, [REPO, ref]):
        compileall.compile_dir(tree / "traceinsight", quiet=1)
    with tempfile.TemporaryDirectory(prefix="analyze_speed_cache_") as cache_dir, \
            tempfile.TemporaryDirectory(prefix="analyze_speed_cwd_") as cwd:
        envs = {tree: environment(cache_dir, tree, cwd) for tree in filter(None, [REPO, ref])}
        warm, _ = commands["traceinsight analyze (text), cached"]
        for _ in range(2):  # fills the caches (an analysis is kept the second time), warms the page cache
            timed(warm, envs[REPO])
        for _ in range(args.runs):  # interleave, so drift hits every case alike
            loads.append(os.getloadavg()[0])
            for name, (cmd, tree) in commands.items():
                times[name].append(timed(cmd, envs[tree]))
    peer = statistics.median(times[PEER])
    rows = []
    print(f"{'case':46} {'median s':>9} {'min s':>7} {'x peer':>7} {'x ref':>6}")
    for name, ts in times.items():
        med = statistics.median(ts)
        ref_name = f"ref: {name}"
        vs_ref = med / statistics.median(times[ref_name]) if ref_name in times else None
        rows.append({"case": name, "median_s": med, "min_s": min(ts), "runs": ts, "ratio_to_peer": med / peer,
                     "ratio_to_ref": vs_ref})
        print(f"{name:46} {med:9.2f} {min(ts):7.2f} {med / peer:7.2f} {'' if vs_ref is None else f'{vs_ref:6.2f}':>6}")
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"trace": str(args.trace), "ref": str(ref) if ref else None,
                               "machine": platform.platform(), "cpus": os.cpu_count(),
                               "load1_min_median_max": [min(loads), statistics.median(loads), max(loads)],
                               "results": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
