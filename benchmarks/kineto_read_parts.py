"""Where the streaming Kineto reader (`kineto.read`) spends its CPU: each part's CPU time in the thread that runs
it (`time.thread_time`, so the reading, scanning and parsing threads are told apart and other processes' load
does not count), summed over the batches of one read.

    PYTHONPATH=. .venv/bin/python -P benchmarks/kineto_read_parts.py TRACE [--out FILE.json]

Parts: `_braces` (numpy: every `}` of a batch), `_closes_array` (does the batch hold the array's end),
`_kept_spans` (separators and kept elements, in the scanning thread), `orjson.loads` of the kept elements and
`read_events` (their rows) in the calling thread; the reading and scanning threads' totals, the calling thread's
and the process's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from traceinsight.ingest import json_stream, kineto, kineto_batch, kineto_prefilter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])

    def timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any, **k: Any) -> Any:
            t0, c0 = time.perf_counter(), time.thread_time()
            out = fn(*a, **k)
            row = acc[label]
            row[0] += time.thread_time() - c0
            row[1] += time.perf_counter() - t0
            row[2] += 1
            return out
        return run

    for name in ("_braces", "_closes_array"):
        setattr(json_stream, name, timed(name, getattr(json_stream, name)))
    kineto_prefilter._kept_spans = timed("_kept_spans", kineto_prefilter._kept_spans)  # type: ignore[assignment]
    kineto.read_events = timed("read_events", kineto.read_events)  # type: ignore[assignment]

    def thread_total(label: str, gen: Callable[..., Any]) -> Callable[..., Any]:
        """A generator function run whole in its own thread: that thread's CPU time when it ends."""
        def run(*a: Any, **k: Any) -> Any:
            c0 = time.thread_time()
            try:
                yield from gen(*a, **k)
            finally:
                acc[label][0] += time.thread_time() - c0
                acc[label][2] += 1
        return run

    kineto.byte_chunks = thread_total("reading thread", kineto.byte_chunks)  # type: ignore[attr-defined]
    kineto._prepare = thread_total("scanning thread", kineto._prepare)  # type: ignore[attr-defined]

    class _Orjson:  # the reader modules' reference, so that only their calls are timed
        JSONDecodeError = orjson.JSONDecodeError
        loads = staticmethod(timed("orjson.loads", orjson.loads))

    kineto.orjson = kineto_batch.orjson = _Orjson  # type: ignore[assignment,attr-defined]
    t0, c0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
    ingest = kineto.read(args.trace)
    wall, cpu, main_cpu = time.perf_counter() - t0, time.process_time() - c0, time.thread_time() - m0
    size = args.trace.stat().st_size
    rows = {label: {"thread_cpu_s": round(v[0], 3), "wall_s": round(v[1], 3), "calls": int(v[2])}
            for label, v in acc.items()}
    print(f"{args.trace} ({size / 1e6:.0f} MB): read {wall:.2f} s wall, {cpu:.2f} CPU-s in all threads, "
          f"{main_cpu:.2f} in the calling thread (load {os.getloadavg()[0]:.1f})")
    for label, r in rows.items():
        print(f"  {label:16} {r['thread_cpu_s']:6.2f} CPU-s {r['wall_s']:6.2f} s wall  {r['calls']} calls")
    counts = {t: len(next(iter(c.values()))) for t, c in (ingest.tables.items() if ingest else []) if c}
    if args.out:
        args.out.write_text(json.dumps({"trace": str(args.trace), "bytes": size, "wall_s": round(wall, 3),
                                        "cpu_s": round(cpu, 3), "calling_thread_cpu_s": round(main_cpu, 3),
                                        "load1": os.getloadavg()[0], "rows": counts, "parts": rows}, indent=1) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
