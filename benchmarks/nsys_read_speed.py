"""Time `traceinsight.ingest.nsys_sqlite.read(path)` on Nsight Systems SQLite exports (issue 6: at least 1M kernel
rows in 5 s on the 2-core benchmark machine).

Inputs: the real export ../shared/traces/h200/flashinfer_decode.sqlite and its replication to ~1M kernel rows
(~7M runtime rows) that benchmarks/ingest_scale.py builds in its scratch folder (run `ingest_scale.py --rows 1M`
first; a missing input is reported and skipped). Each run is a fresh process: `read_s` is the time of `read()`
alone (timed inside the process), `wall_s` the process's wall time (interpreter start and imports included),
`rss_mib` its peak RSS (rusage via wait4).

    .venv/bin/python benchmarks/nsys_read_speed.py [--repeat 3] [--reader path/to/nsys_sqlite.py]
        [--scratch /tmp/traceinsight-bench] [--out benchmarks/results/nsys_read_speed.json]

`--reader` times another copy of the reader module (e.g. the version before a change) on the same inputs.
The machine is shared and noisy: compare runs taken together, and repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REAL = REPO.parent / "shared" / "traces" / "h200" / "flashinfer_decode.sqlite"
SCRATCH = Path("/tmp/traceinsight-bench")
RESULTS = REPO / "benchmarks" / "results" / "nsys_read_speed.json"
TARGET_S = 5.0  # issue 6: 1M kernel rows in 5 s

# Runs in the child: load the reader (the package's, or the file given), time read(), print counts as JSON.
_CHILD = """
import importlib.util, json, sys, time
from pathlib import Path
path, reader = Path(sys.argv[1]), sys.argv[2]
if reader:
    spec = importlib.util.spec_from_file_location("nsys_sqlite_under_test", reader)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
else:
    from traceinsight.ingest import nsys_sqlite as mod
t0 = time.perf_counter()
ingest = mod.read(path)
read_s = time.perf_counter() - t0
rows = {t: len(next(iter(c.values()), [])) for t, c in ingest.tables.items()}
print(json.dumps({"read_s": read_s, "rows": rows, "warnings": len(ingest.warnings)}))
"""


def _run_with_rusage(path: Path, reader: str) -> dict[str, Any]:
    """One fresh-process run of read(path): read_s, wall_s, rss_mib (from wait4), row counts."""
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), reader], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert p.stdout is not None and p.stderr is not None
    out = p.stdout.read()
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if p.returncode:
        lines = err.decode(errors="replace").strip().splitlines()
        raise SystemExit(f"{path}: read failed: {lines[-1] if lines else p.returncode}")
    result = json.loads(out)
    result.update(wall_s=wall, rss_mib=usage.ru_maxrss / 1024)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reader", default="", help="another copy of nsys_sqlite.py to time instead")
    ap.add_argument("--scratch", type=Path, default=SCRATCH)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    inputs = [("real flashinfer_decode", REAL), *_scaled(args.scratch)]
    results = []
    print(f"{'input':28} {'kernels':>9} {'launches':>9} {'read s (median, min)':>22} {'wall s':>7} {'RSS MiB':>8}")
    for label, path in inputs:
        if not path.exists():
            print(f"{label:28} missing: {path} (build it with benchmarks/ingest_scale.py --rows 1M)")
            continue
        runs = [_run_with_rusage(path, args.reader) for _ in range(args.repeat)]
        reads = [r["read_s"] for r in runs]
        row = {
            "input": label,
            "path": str(path),
            "rows": runs[0]["rows"],
            "read_s_median": statistics.median(reads),
            "read_s_min": min(reads),
            "read_s_runs": reads,
            "wall_s_median": statistics.median(r["wall_s"] for r in runs),
            "rss_mib_max": max(r["rss_mib"] for r in runs),
        }
        results.append(row)
        kernels, launches = row["rows"].get("kernels", 0), row["rows"].get("launches", 0)
        print(
            f"{label:28} {kernels:>9} {launches:>9} {row['read_s_median']:>13.3f} ({row['read_s_min']:.3f})"
            f" {row['wall_s_median']:>7.2f} {row['rss_mib_max']:>8.0f}"
        )
    doc = {
        "reader": args.reader or "traceinsight.ingest.nsys_sqlite",
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "target": f"{TARGET_S} s for 1M kernel rows",
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")


def _scaled(scratch: Path) -> list[tuple[str, Path]]:
    """The replicated exports ingest_scale.py built (nsys_<rows>/*.sqlite), smallest first."""
    found = sorted(scratch.glob("nsys_*/*.sqlite"), key=lambda p: p.stat().st_size)
    return [(f"{p.parent.name} (replicated)", p) for p in found] or [
        ("nsys_1M (replicated)", scratch / "nsys_1M" / "flashinfer_decode_x.sqlite")
    ]


if __name__ == "__main__":
    main()
