"""The step breakdown stage alone, this checkout against a reference checkout's, in one process on the same steps:
the trace is analyzed once (steps and schedule model, no rules), then each checkout's `breakdowns` runs in turns,
`--repeat` times, timed by CPU (the process, all threads: DuckDB's too) and wall; the ratio of the medians taken in
the same run is the number to quote on a loaded machine. Every step's breakdown must be the same in both
(`to_json`, compared once), else it exits non-zero.

    .venv/bin/python benchmarks/breakdown_stage.py TRACE --ref /tmp/ref [--repeat 3] [--profile] [--out FILE.json]

The reference's breakdown module (REF/traceinsight/model/breakdown.py, a single file) is loaded by its path beside
this checkout's package, which gives it everything it imports but its named queries (read from REF).
`--profile`: cProfile of this checkout's stage once, its top functions by cumulative time on stderr.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import json
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import traceinsight.pipeline as pipeline
from traceinsight.model import breakdown as this
from traceinsight.tuning import gc_paused, tune


def _load_ref(root: Path) -> Any:
    spec = importlib.util.spec_from_file_location("ref_breakdown", root / "traceinsight/model/breakdown.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ref_breakdown"] = module
    spec.loader.exec_module(module)
    # Its named queries from the reference too (a query it reads may be gone from this checkout).
    module.sql = lambda name: (root / "traceinsight/queries" / f"{name}.sql").read_text()
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--ref", type=Path, required=True, help="a checkout of the reference commit")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    tune()  # as the command's entry does
    ref = _load_ref(args.ref)
    got: list[tuple[Any, int, list[Any]]] = []
    pipeline.breakdowns = lambda db, trace_id, steps: got.append((db, trace_id, steps)) or {}  # type: ignore[assignment]
    db, _ = pipeline.analyze([args.trace], diagnostics=False, cache=False)
    (db, trace_id, steps), = got
    print(f"{len(steps)} steps", file=sys.stderr, flush=True)
    runs: dict[str, list[dict[str, float]]] = {"main": [], "this": []}
    outs: dict[str, dict[int, Any]] = {}
    for i in range(args.repeat):
        for name, fn in (("main", ref.breakdowns), ("this", this.breakdowns)):
            with gc_paused():
                t0, c0 = time.perf_counter(), time.process_time()
                out = fn(db, trace_id, steps)
                runs[name].append({"wall_s": round(time.perf_counter() - t0, 3),
                                   "cpu_s": round(time.process_time() - c0, 3)})
            print(f"run {i + 1}: {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
            if i == 0:
                outs[name] = out
            del out
        if i == 0:
            same = list(outs["main"]) == list(outs["this"]) and all(
                outs["main"][k].to_json() == b.to_json() for k, b in outs["this"].items())
            outs.clear()
            if not same:
                raise SystemExit("the breakdowns differ from the reference's")
    if args.profile:
        prof = cProfile.Profile()
        with gc_paused():
            prof.runcall(this.breakdowns, db, trace_id, steps)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
    cpu = {k: statistics.median(r["cpu_s"] for r in v) for k, v in runs.items()}
    wall = {k: statistics.median(r["wall_s"] for r in v) for k, v in runs.items()}
    result = {"trace": str(args.trace), "ref": str(args.ref), "steps": len(steps), "repeat": args.repeat,
              "median_cpu_s": cpu, "median_wall_s": wall, "cpu_ratio": round(cpu["this"] / cpu["main"], 3),
              "runs": runs}
    print(f"breakdown stage: this {cpu['this']:.2f} cpu-s, main {cpu['main']:.2f} cpu-s: "
          f"{result['cpu_ratio']:.3f}x (median of {args.repeat})", file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
