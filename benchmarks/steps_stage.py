"""The steps stage alone (`model.steps.group_steps`) on one trace, this checkout against a reference checkout, by
CPU seconds, the two run in alternation so both see the same load.

    .venv/bin/python benchmarks/steps_stage.py TRACE --ref /tmp/ref [--repeat 3] [--out FILE.json]

The trace is ingested once (by this checkout) and saved (`TraceDB.save_trace`) to a temporary DuckDB file. Each run
is a fresh process of one side that adds the saved trace to an in-memory database, labels it, imports
pyarrow.compute (the nsys reader has, in `analyze`) and times group_steps as the pipeline runs it (the process
tuned, the collector paused). Prints each run and the median CPU-s of each side with their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# What each side's process runs: argv[1] the saved trace, argv[2] the trace's path.
RUN = """
import json, sys, time
from pathlib import Path
from traceinsight.tuning import tune, gc_paused
tune()
import pyarrow.compute  # noqa: F401  (imported by the nsys reader in `analyze`)
from traceinsight.ingest.store import TraceDB
from traceinsight.model.kernel_table import ensure_labels
from traceinsight.model.steps import group_steps
db = TraceDB()
tid = db.add_saved(Path(sys.argv[1]), Path(sys.argv[2]))
db.compress()
ensure_labels(db)
with gc_paused():
    t0, c0 = time.perf_counter(), time.process_time()
    steps, unassigned = group_steps(db, tid)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
print(json.dumps({"cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "steps": len(steps),
                  "launches": sum(len(s.launches) for s in steps), "unassigned": len(unassigned)}))
"""


def _save(trace: Path, dest: Path) -> None:
    from traceinsight.ingest import load

    db, ids = load([trace], cache=False)
    db.save_trace(ids[0], dest)
    db.close()


def _run(root: Path, saved: Path, trace: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(root), "TRACEINSIGHT_CACHE": "0"}
    out = subprocess.run([sys.executable, "-P", "-c", RUN, str(saved), str(trace)], env=env, cwd=root,
                         capture_output=True, text=True, check=True)
    got: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--ref", type=Path, required=True, help="a reference checkout (e.g. main)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "trace.duckdb"
        _save(args.trace, saved)
        runs: dict[str, list[dict[str, float]]] = {"ref": [], "new": []}
        for i in range(args.repeat):
            for side, root in (("ref", args.ref), ("new", REPO)):
                got = _run(root.resolve(), saved, args.trace)
                runs[side].append(got)
                print(f"run {i + 1} {side}: {got}", file=sys.stderr, flush=True)
    ref = statistics.median(r["cpu_s"] for r in runs["ref"])
    new = statistics.median(r["cpu_s"] for r in runs["new"])
    same = all(a[k] == b[k] for a, b in zip(runs["ref"], runs["new"], strict=True)
               for k in ("steps", "launches", "unassigned"))
    result = {"trace": str(args.trace), "ref": str(args.ref), "ref_cpu_s": ref, "new_cpu_s": new,
              "ratio": round(new / ref, 3), "same_counts": same, "runs": runs}
    print(f"steps stage: ref {ref:.2f} CPU-s, new {new:.2f} CPU-s, new/ref {new / ref:.2f}"
          f"{'' if same else ' (step or launch counts differ)'}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
