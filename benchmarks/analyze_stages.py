"""Where `analyze` spends its time on one trace: wall time, CPU time (the process, all threads) and peak RSS after
each stage of the pipeline (ingest, labels, steps, schedule model, rules) and for the JSON document, in one process.

    .venv/bin/python benchmarks/analyze_stages.py TRACE [--out FILE.json]

For the scale inputs, build them first (`benchmarks/ingest_scale.py --rows 1M --build-only`) and pass e.g.
/tmp/traceinsight-bench/nsys_1M/flashinfer_decode_x.sqlite. The cache is off: every run reads the file.
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

import traceinsight.pipeline as pipeline
from traceinsight.report.json_doc import write_documents

STAGES = {"load": "ingest", "ensure_labels": "labels", "group_steps": "steps", "attach": "schedule model",
          "breakdowns": "step breakdown", "diagnose": "rules"}


class _Counting(io.RawIOBase):
    """A sink that counts the bytes written to it (the JSON goes nowhere, as to /dev/null)."""

    def __init__(self) -> None:
        self.bytes = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.bytes += len(b)
        return len(b)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any, **k: Any) -> Any:
            t0, c0 = time.perf_counter(), time.process_time()
            out = fn(*a, **k)
            rows.append({"stage": STAGES[name], "wall_s": round(time.perf_counter() - t0, 3),
                         "cpu_s": round(time.process_time() - c0, 3),
                         "peak_rss_mb": round(_peak_mb())})
            return out
        return run

    for name in STAGES:  # the pipeline module's own references, so every call is timed
        setattr(pipeline, name, timed(name, getattr(pipeline, name)))
    started = time.perf_counter()
    _, analyses = pipeline.analyze([args.trace], cache=False)
    for label, steps in (("JSON document (default: the steps that matter)", "selected"),
                         ("JSON document (--steps all, streamed)", "all")):
        t0, c0 = time.perf_counter(), time.process_time()
        sink = _Counting()
        write_documents(analyses, cast(IO[bytes], sink), steps)
        rows.append({"stage": label, "wall_s": round(time.perf_counter() - t0, 3),
                     "cpu_s": round(time.process_time() - c0, 3),
                     "peak_rss_mb": round(_peak_mb()), "bytes": sink.bytes})
    a = analyses[0]
    result = {"trace": str(args.trace), "kernels": sum(k["count"] for k in a.kernels), "steps": len(a.steps),
              "findings": len(a.findings), "total_s": round(time.perf_counter() - started, 3), "stages": rows}
    for r in rows:
        print(f"{r['stage']:16} {r['wall_s']:8.2f} s  {r['cpu_s']:8.2f} cpu-s  peak RSS {r['peak_rss_mb']:6} MB",
              file=sys.stderr)
    print(f"{'total':16} {result['total_s']:8.2f} s  ({result['kernels']} kernels, {result['steps']} steps)",
          file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
