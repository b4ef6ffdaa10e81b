"""Throughput of `traceinsight fleet analyze` on N replicated real traces (default 200): serial (one process),
the local process pool, and a local Ray instance, next to the peer measured in the same run: a bare loop that
calls the analysis (`pipeline.analyze`) on each trace in one process and writes nothing.

    .venv/bin/python benchmarks/fleet_scale.py [--traces 200] [--workers 2] [--reports json]

The traces are real Kineto captures from examples/ and tests/data/ (FlashInfer and FA3 on the H200, SGLang and
vLLM on the MI300X, with their sidecars) copied round-robin, each copy made distinct by a trailing gzip member of
its own (identical copies would be analyzed once: the fleet skips content it has seen). Every run starts from an
empty dataset and an empty ingest cache.

Per-trace overhead = (wall x workers - sum of the traces' own analysis seconds) / traces: what the fleet
machinery (discovery, digests, dispatch, pickling, writing Parquet and the manifest, idle workers) adds to each
trace. Ray runs inside a private network namespace (`unshare -n`, loopback only), as the tests run it.

Writes benchmarks/results/fleet_scale.json and prints a table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = (  # (trace, sidecar): real captures, 0.2-0.4 s each to analyze on this machine
    ("examples/h200/flashinfer_decode_small.pt.trace.json.gz", None),
    ("tests/data/foreign/tracelens/sglang_mi300x_Qwen3-8B_decode.json.gz", None),
    ("tests/data/h200_ncu/ncu_pair_torch.pt.trace.json.gz", "tests/data/h200_ncu/ncu_pair_torch.sidecar.json"),
    ("examples/fa3/sweep_q32kv4d128_fa3_torch.pt.trace.json.gz",
     "examples/fa3/sweep_q32kv4d128_fa3_torch.sidecar.json.gz"),
    ("tests/data/foreign/tracelens/vllm_mi300x_gptoss_decode_graph_execution.json.gz", None),
)


def make_fleet(folder: Path, n: int) -> list[Path]:
    """`n` distinct trace files (and their sidecars) in `folder`, replicated round-robin from SOURCES."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        trace, sidecar = SOURCES[i % len(SOURCES)]
        stem = f"replica{i:04d}"
        dest = folder / f"{stem}.pt.trace.json.gz"
        dest.write_bytes((REPO / trace).read_bytes() + gzip.compress(b" " * (i + 1)))  # trailing blanks: distinct
        if sidecar:
            shutil.copy(REPO / sidecar, folder / (stem + sidecar[sidecar.index(".sidecar."):]))
        out.append(dest)
    return out


def bare_loop(traces: list[Path]) -> float:
    """The peer: analyze every trace in this process, one after the other, writing nothing."""
    code = (
        "import sys, time\nfrom pathlib import Path\nfrom traceinsight.pipeline import analyze\n"
        "from traceinsight.ingest.paths import sidecar_for\n"
        "from traceinsight.tuning import tune\n"
        "tune()  # as the command's entry (and the pool's workers) do\n"
        "t0 = time.perf_counter()\n"
        "for p in sys.argv[1:]:\n"
        "    db, _ = analyze([Path(p)], meta=list(sidecar_for(Path(p))), cache=False)\n"
        "    db.close()\n"
        "print(time.perf_counter() - t0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code, *map(str, traces)], capture_output=True, text=True, check=True,
                       cwd=REPO)
    return float(r.stdout.strip().splitlines()[-1])


def fleet(folder: Path, out: Path, extra: list[str], reports: str, netns: bool = False) -> dict[str, object]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "traceinsight", "fleet", "analyze", str(folder), "--out", str(out),
           "--reports", reports, "--no-cache", "-q", "--format", "json", *extra]
    if netns:
        cmd = ["unshare", "-n", "bash", "-c", 'ip link set lo up && exec "$@"', "fleet", *cmd]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0"))
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"fleet analyze {' '.join(extra)} failed ({r.returncode}): {r.stderr[-2000:]}")
    doc = json.loads(r.stdout)
    task_s = sum(float(e["seconds"]) for e in doc["entries"])
    return {"wall_s": wall, "analyzed": doc["analyzed"], "failed": doc["failed"], "task_s": task_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=int, default=200)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--reports", default="json", help="per-trace reports written by each fleet run (json, html)")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "fleet_scale.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        os.environ["TRACEINSIGHT_CACHE_DIR"] = str(Path(tmp) / "cache")
        folder = Path(tmp) / "traces"
        traces = make_fleet(folder, args.traces)
        size = sum(p.stat().st_size for p in folder.iterdir())
        rows: dict[str, dict[str, object]] = {}
        t_bare = bare_loop(traces)
        rows["bare loop (peer)"] = {"wall_s": t_bare, "workers": 1, "task_s": t_bare, "analyzed": len(traces)}
        runs = [("fleet, serial", ["--workers", "1"], 1, False),
                (f"fleet, local pool ({args.workers})", ["--workers", str(args.workers)], args.workers, False)]
        if not args.no_ray:
            runs.append((f"fleet, local Ray ({args.workers})", ["--ray", "local", "--workers", str(args.workers)],
                         args.workers, True))
        for name, extra, workers, netns in runs:
            r = fleet(folder, Path(tmp) / "ds", extra, args.reports, netns)
            r["workers"] = workers
            rows[name] = r
    n = args.traces
    for r in rows.values():
        wall = float(r["wall_s"])  # type: ignore[arg-type]
        r["traces_per_s"] = n / wall
        r["vs_peer"] = t_bare / wall
        r["overhead_ms_per_trace"] = (wall * int(r["workers"]) - float(r["task_s"])) / n * 1e3  # type: ignore[arg-type]
    result = {
        "traces": n, "bytes": size, "reports": args.reports, "cpus": os.cpu_count(),
        "load_average": os.getloadavg(), "python": platform.python_version(),
        "runs": rows,
        "note": "vs_peer = bare loop wall / this wall (higher is faster); overhead = (wall x workers - sum of "
                "per-trace analysis seconds) / traces",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{n} traces ({size / 2**20:.1f} MB), reports: {args.reports}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'run':28} {'wall s':>8} {'traces/s':>9} {'x peer':>7} {'overhead ms/trace':>18}")
    for name, r in rows.items():
        print(f"{name:28} {float(r['wall_s']):8.1f} {float(r['traces_per_s']):9.2f} "  # type: ignore[arg-type]
              f"{float(r['vs_peer']):7.2f} {float(r['overhead_ms_per_trace']):18.0f}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
