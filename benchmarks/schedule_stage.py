"""The schedule model stage (`model.attach`) alone, repeated on one analysis: CPU seconds of each call and of its
parts (idle gaps, launch models, ...; 'rest' is attach's own passes over the steps), for the `traceinsight`
importable in this process. The trace is ingested and its steps grouped once (cache off); attach then runs
--repeat times on the same steps, so the stages around it add no noise.

    .venv/bin/python -P benchmarks/schedule_stage.py TRACE [--meta SIDECAR] [--repeat 3]
    PYTHONPATH=/tmp/ref .venv/bin/python -P benchmarks/schedule_stage.py TRACE    # a reference checkout
    .venv/bin/python -P benchmarks/schedule_stage.py TRACE --ref /tmp/ref [--out F.json]   # both, interleaved

Prints one line per call and the median. `--ref`: the reference checkout's differing modules (tables_speed.Swap)
stand in for ours on every other call, on the same steps (the steps stage is this checkout's), and the two
schedules are compared (every threshold, batch, launch model and idle gap equal); prints both medians and their
ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tables_speed import Swap  # noqa: E402  (the reference's modules in place of ours)

import traceinsight.model.attach as am  # noqa: E402
import traceinsight.pipeline as pipeline  # noqa: E402

PARTS = ("idle_gaps", "launch_models", "calibrate_costs", "step_graph_modes", "sidecar_rows", "match_log")


class _Stop(Exception):
    pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--meta", type=Path, action="append", default=[])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ref", type=Path, help="a reference checkout, run interleaved with this one")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    try:  # the process tuned as the command's entry tunes it
        from traceinsight.tuning import tune
    except ImportError:
        pass
    else:
        tune()
    got: list[tuple[Any, ...]] = []

    def stop(*a: Any) -> Any:
        got.append(a)
        raise _Stop

    pipeline.attach = stop  # type: ignore[assignment]
    try:
        pipeline.analyze([args.trace], meta=args.meta, cache=False)
    except _Stop:
        pass
    spent: dict[str, float] = {}

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any, **k: Any) -> Any:
            c0 = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - c0
        return run

    def wrap(module: Any) -> None:
        for name in PARTS:  # attach's own references (a part an older copy lacks is left out)
            if hasattr(module, name) and not hasattr(getattr(module, name), "timed"):
                fn = timed(name, getattr(module, name))
                fn.timed = True  # type: ignore[attr-defined]
                setattr(module, name, fn)

    def once(module: Any, label: str) -> tuple[float, Any]:
        wrap(module)
        spent.clear()
        c0 = time.process_time()
        out = module.attach(*got[0])
        total = time.process_time() - c0
        parts = "  ".join(f"{k} {v:.3f}" for k, v in spent.items() if v >= 0.001)
        print(f"{label:4} attach {total:6.3f} cpu-s  ({parts}  rest {total - sum(spent.values()):.3f})", flush=True)
        return total, out

    swap = Swap(args.ref) if args.ref else None
    ref_am: Any = None
    if swap is not None:
        with swap.reference():
            import traceinsight.model.attach as ref_am
    totals: dict[str, list[float]] = {"this": [], "ref": []}
    same = True
    for _ in range(args.repeat):
        if swap is not None:
            with swap.reference():
                t, theirs = once(ref_am, "ref")
            totals["ref"].append(t)
        t, ours = once(am, "this")
        totals["this"].append(t)
        if swap is not None:
            same &= _same(ours, theirs)
    mine = statistics.median(totals["this"])
    print(f"median {mine:.3f} cpu-s over {args.repeat} calls")
    result: dict[str, Any] = {"trace": str(args.trace), "this": totals["this"]}
    if swap is not None:
        ref = statistics.median(totals["ref"])
        print(f"ref median {ref:.3f} cpu-s; this / ref {mine / ref:.3f}; schedules identical: {same}")
        result.update(ref=totals["ref"], ratio=round(mine / ref, 3), identical=same)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    if not same:
        raise SystemExit(1)


def _same(a: Any, b: Any) -> bool:
    """Two schedules equal in what the analysis reads of them: thresholds, batches, launch models (by kernel id, in
    order), costs, notes, warnings, measurements, graph kernels and idle gaps."""
    import numpy as np

    if (a.thresholds != b.thresholds or a.batches != b.batches or list(a.models.items()) != list(b.models.items())
            or a.costs != b.costs or a.notes != b.notes or a.warnings != b.warnings or a.measured != b.measured
            or a.cuda_graph_kernels != b.cuda_graph_kernels):
        return False
    ga, gb = a.idle_gaps, b.idle_gaps
    return all(np.array_equal(getattr(ga, f), getattr(gb, f)) for f in ("start_ns", "end_ns", "before_step"))


if __name__ == "__main__":
    main()
