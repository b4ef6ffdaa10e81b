"""The schedule model stage (`model.attach`) alone, repeated on one analysis: CPU seconds of each call and of its
parts (idle gaps, launch models, ...; 'rest' is attach's own passes over the steps), for the `traceinsight`
importable in this process. The trace is ingested and its steps grouped once (cache off); attach then runs
--repeat times on the same steps, so the stages around it add no noise.

    .venv/bin/python -P benchmarks/schedule_stage.py TRACE [--meta SIDECAR] [--repeat 3]
    PYTHONPATH=/tmp/ref .venv/bin/python -P benchmarks/schedule_stage.py TRACE    # a reference checkout

Prints one line per call and the median.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import traceinsight.model.attach as am
import traceinsight.pipeline as pipeline

PARTS = ("idle_gaps", "launch_models", "calibrate_costs", "step_graph_modes", "sidecar_rows", "match_log")


class _Stop(Exception):
    pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--meta", type=Path, action="append", default=[])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    try:  # the process tuned as the command's entry tunes it
        from traceinsight.tuning import tune
    except ImportError:
        pass
    else:
        tune()
    attach = pipeline.attach
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

    for name in PARTS:  # attach's own references (a part an older copy lacks is left out)
        if hasattr(am, name):
            setattr(am, name, timed(name, getattr(am, name)))
    totals = []
    for _ in range(args.repeat):
        spent.clear()
        c0 = time.process_time()
        attach(*got[0])
        total = time.process_time() - c0
        totals.append(total)
        parts = "  ".join(f"{k} {v:.3f}" for k, v in spent.items() if v >= 0.001)
        print(f"attach {total:6.3f} cpu-s  ({parts}  rest {total - sum(spent.values()):.3f})", flush=True)
    print(f"median {statistics.median(totals):.3f} cpu-s over {args.repeat} calls")


if __name__ == "__main__":
    main()
