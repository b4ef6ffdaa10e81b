"""What reading every document from the analysis tables (report/saved.py, the one document builder) costs a cold
`traceinsight analyze --format json`: CPU seconds of the command in a fresh process, this tree against a peer tree
(the code before, e.g. `git archive <commit> traceinsight | tar -x -C /tmp/base`) measured in the same run,
interleaved, on the demo sweep (examples/h200, with its sidecar) and the shared FA2 sweep. No cache: every run
reads and analyzes the trace.

    .venv/bin/python benchmarks/document_speed.py --peer /tmp/base [--runs 5] [--format json]

Prints per trace the median CPU seconds (user + system of the child) of each tree and their ratio (this / peer);
writes benchmarks/results/document_speed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces" / "h200"
TRACES = {
    "demo sweep (examples/h200)": (REPO / "examples/h200/flashinfer_decode_sweep.pt.trace.json.gz",
                                   REPO / "examples/h200/flashinfer_decode_sweep.meta.json.gz"),
    "FA2 sweep (shared)": (SHARED / "flashinfer_fa2_decode_sweep.pt.trace.json.gz",
                           SHARED / "flashinfer_fa2_decode_sweep.meta.json.gz"),
}


def cpu_run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", type=Path, required=True, help="a source tree holding the peer's traceinsight/")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--format", default="json")
    args = ap.parse_args()
    if not (args.peer / "traceinsight" / "__init__.py").is_file():
        sys.exit(f"{args.peer}: no traceinsight/ package in it")
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    base["TRACEINSIGHT_ANALYSIS_CACHE"] = "0"
    envs = {"this": {**base, "PYTHONPATH": str(REPO)}, "peer": {**base, "PYTHONPATH": str(args.peer.resolve())}}
    out = Path(tempfile.mkdtemp(prefix="document-speed-")) / "out"
    rows = []
    for label, (trace, meta) in TRACES.items():
        cmd = [sys.executable, "-m", "traceinsight", "analyze", str(trace), "--meta", str(meta), "--format",
               args.format, "--no-cache", "-q", "--out", str(out)]
        for env in envs.values():
            cpu_run(cmd, env)  # warm the page cache and the .pyc files
        cpu: dict[str, list[float]] = {k: [] for k in envs}
        wall: dict[str, list[float]] = {k: [] for k in envs}
        for _ in range(args.runs):  # interleaved, so drift in the machine's load hits both alike
            for side, env in envs.items():
                c, w = cpu_run(cmd, env)
                cpu[side].append(c)
                wall[side].append(w)
        med = {k: statistics.median(v) for k, v in cpu.items()}
        row = {"trace": label, "path": str(trace), "cpu_s": cpu, "wall_s": wall, "median_cpu_s": med,
               "ratio": med["this"] / med["peer"]}
        rows.append(row)
        print(f"{label:28} this {med['this']:.3f} CPU-s  peer {med['peer']:.3f} CPU-s  ratio {row['ratio']:.3f}")
    dest = REPO / "benchmarks" / "results" / "document_speed.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps({"format": args.format, "peer": str(args.peer), "runs": args.runs,
                                "machine": platform.platform(), "cpus": os.cpu_count(), "results": rows},
                               indent=1) + "\n")
    print(f"wrote {dest.relative_to(REPO)}")


if __name__ == "__main__":
    main()
