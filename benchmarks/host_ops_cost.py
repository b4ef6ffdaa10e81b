"""What storing the host operations at ingest costs (the `host_ops` table, issue 28 item 3): `ingest.load` of each
Kineto trace with the host-op scan (`HostOps.scan`, this checkout) against the same load with the scan switched
off (the peer: what ingest cost before the table), taken in turns in one process, the cache off.

    .venv/bin/python benchmarks/host_ops_cost.py [--repeat 5] [--out benchmarks/results/host_ops_cost.json]
        [TRACE ...]   # default: examples/loop/*.json.gz and ../shared/traces/h200/flashinfer_fa2_decode_sweep...

CPU seconds of the process (every thread: the reading and scanning threads too) around each `load`, median of
`--repeat`; the ratio with/without is the number to quote (the machine is shared and noisy). Also the rows the
table gained and the time a host-op query takes for the windows of ten steps, which replaced streaming the file
again (the reader this table replaced, `read_kineto_ops`, took the same time as the scan, once per analysis that
asked).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import time
from pathlib import Path

from traceinsight.ingest import host_ops, load
from traceinsight.queries import sql

REPO = Path(__file__).resolve().parents[1]
DEFAULT = [*sorted((REPO / "examples" / "loop").glob("*.pt.trace.json.gz")),
           REPO.parent / "shared" / "traces" / "h200" / "flashinfer_fa2_decode_sweep.pt.trace.json.gz"]
RESULTS = REPO / "benchmarks" / "results" / "host_ops_cost.json"


def cpu_load(path: Path, scan: bool) -> tuple[float, int]:
    """CPU seconds of one `load` (the scan on or off) and the host_ops rows it stored."""
    real = host_ops.HostOps.scan
    if not scan:
        host_ops.HostOps.scan = lambda self, *batch: None  # type: ignore[method-assign]
    try:
        gc.collect()
        t0 = time.process_time()
        db, (trace,) = load([path], cache=False)
        cpu = time.process_time() - t0
    finally:
        host_ops.HostOps.scan = real  # type: ignore[method-assign]
    n = db.rows("SELECT count(*) AS n FROM host_ops WHERE trace_id = $t", {"t": trace})[0]["n"]
    db.close()
    return cpu, int(n)


def query_cpu(path: Path) -> float:
    """CPU seconds of queries/host_ops.sql for the windows of ten 'steps' (tenths of the trace's GPU span)."""
    db, (trace,) = load([path], cache=False)
    lo, hi = db.con.execute("SELECT start_ns, end_ns FROM traces WHERE trace_id = $t", {"t": trace}).fetchone()
    span = (hi - lo) // 10
    windows = [(lo + i * span, lo + i * span + span // 2) for i in range(10)]
    t0 = time.process_time()
    db.sql(sql("host_ops"), {"trace": trace, "lo": [w[0] for w in windows], "hi": [w[1] for w in windows]}).fetchall()
    cpu = time.process_time() - t0
    db.close()
    return cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*", type=Path, default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    out: dict[str, object] = {"machine": platform.node(), "python": platform.python_version(), "repeat": args.repeat,
                              "traces": []}
    cpu_load(args.traces[0], True)  # warm: imports, first DuckDB connection
    total = {True: 0.0, False: 0.0}
    for path in args.traces:
        runs: dict[bool, list[float]] = {True: [], False: []}
        rows = 0
        for i in range(args.repeat):
            for scan in ((True, False) if i % 2 == 0 else (False, True)):  # in turns, alternating who goes first
                cpu, n = cpu_load(path, scan)
                runs[scan].append(cpu)
                rows = max(rows, n)
        med = {k: statistics.median(v) for k, v in runs.items()}
        total[True] += med[True]
        total[False] += med[False]
        row = {"trace": path.name, "host_ops_rows": rows,
               "cpu_s_with": round(med[True], 3), "cpu_s_without": round(med[False], 3),
               "ratio": round(med[True] / med[False], 3), "runs_with": [round(x, 3) for x in runs[True]],
               "runs_without": [round(x, 3) for x in runs[False]], "query_cpu_s": round(query_cpu(path), 4)}
        out["traces"].append(row)  # type: ignore[attr-defined]
        print(f"{path.name}: {rows} host ops; load {med[True]:.3f} CPU-s with the table, {med[False]:.3f} without "
              f"(x{med[True] / med[False]:.3f}); host_ops.sql for 10 windows {row['query_cpu_s']} CPU-s", flush=True)
    out["total_ratio"] = round(total[True] / total[False], 3)
    print(f"all: {total[True]:.3f} / {total[False]:.3f} CPU-s = x{out['total_ratio']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
