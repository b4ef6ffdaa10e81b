"""The step breakdown stage alone, this checkout against a reference checkout's, in one process on the same steps:
the trace is analyzed once (steps and schedule model, no rules), then each checkout's `breakdowns` runs in turns,
`--repeat` times, timed by CPU (the process, all threads: DuckDB's too) and wall; the ratio of the medians taken in
the same run is the number to quote on a loaded machine. Every step's breakdown must be the same in both
(`to_json`, compared once), else it exits non-zero.

    .venv/bin/python benchmarks/breakdown_stage.py TRACE --ref /tmp/ref [--repeat 3] [--profile] [--out FILE.json]

The reference's breakdown and gpu_work modules (REF/traceinsight/model/{breakdown,gpu_work}.py) are loaded by
their paths beside this checkout's package, which gives them everything else they import but their named queries
(read from REF). Each side's breakdowns are read off the steps after it runs (`Step.breakdown`; a reference that
returns them by step index too is read the same way).
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


def _load(root: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"ref_{name}", root / f"traceinsight/model/{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"ref_{name}"] = module
    spec.loader.exec_module(module)
    # Its named queries from the reference too (a query it reads may be gone from this checkout).
    module.sql = lambda name: (root / "traceinsight/queries" / f"{name}.sql").read_text()
    return module


def _load_ref(root: Path) -> Any:
    module = _load(root, "breakdown")
    if hasattr(module, "gpu_work"):  # the reference's own reading of the GPU work, not this checkout's
        module.gpu_work = _load(root, "gpu_work").gpu_work
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
    outs: dict[str, list[Any]] = {}
    for i in range(args.repeat):
        for name, fn in (("main", ref.breakdowns), ("this", this.breakdowns)):
            with gc_paused():
                t0, c0 = time.perf_counter(), time.process_time()
                fn(db, trace_id, steps)
                runs[name].append({"wall_s": round(time.perf_counter() - t0, 3),
                                   "cpu_s": round(time.process_time() - c0, 3)})
            print(f"run {i + 1}: {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
            if i == 0:
                outs[name] = [s.breakdown.to_json() if s.breakdown is not None else None for s in steps]
            for s in steps:
                s.breakdown = None
        if i == 0:
            same = outs["main"] == outs["this"] and any(b is not None for b in outs["this"])
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
