"""How long `traceinsight analyze` takes on the real 27 MB H200 sweep trace, end to end (a fresh process, as a
user runs it), next to a peer measured in the same run: a plain `python -c "json.load(gzip.open(...))"`, which
only parses the file. Machines here are noisy, so the ratio to the peer is the number to compare across runs.

    .venv/bin/python benchmarks/analyze_speed.py [--runs 5] [--trace PATH]

Prints a table and writes benchmarks/results/analyze_speed.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO / "examples" / "h200" / "flashinfer_decode_sweep.pt.trace.json.gz"


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    args = ap.parse_args()
    cli = str(Path(sys.executable).with_name("traceinsight"))
    cases = {
        "traceinsight analyze --format json": [cli, "analyze", str(args.trace), "--format", "json"],
        "traceinsight analyze (text)": [cli, "analyze", str(args.trace)],
        "peer: python json.load(gzip.open())": [
            sys.executable, "-c", f"import gzip, json; json.load(gzip.open({str(args.trace)!r}))"],
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    timed(cases["traceinsight analyze --format json"])  # warm the page cache and .pyc files
    for _ in range(args.runs):  # interleave, so drift hits every case alike
        for name, cmd in cases.items():
            times[name].append(timed(cmd))
    peer = statistics.median(times["peer: python json.load(gzip.open())"])
    rows = []
    print(f"{'case':40} {'median s':>9} {'min s':>7} {'x peer':>7}")
    for name, ts in times.items():
        med = statistics.median(ts)
        rows.append({"case": name, "median_s": med, "min_s": min(ts), "runs": ts, "ratio_to_peer": med / peer})
        print(f"{name:40} {med:9.2f} {min(ts):7.2f} {med / peer:7.2f}")
    out = REPO / "benchmarks" / "results" / "analyze_speed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"trace": str(args.trace), "machine": platform.platform(), "cpus": _cpus(),
                               "results": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(REPO)}")


def _cpus() -> int | None:
    import os

    return os.cpu_count()


if __name__ == "__main__":
    main()
