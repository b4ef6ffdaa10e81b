"""A probe for issue 13's 1 GB Kineto target: how fast could a typed decoder read the events traceinsight keeps?

msgspec (not a dependency) decodes the whole `traceEvents` array into one small struct per event with only the
fields the tables use (`args` kept as raw bytes, parsed later only for the events kept), next to orjson's full
parse of the same bytes (what traceinsight's reader uses on the events it keeps), in one process, alternating.
It decodes the whole document at once (memory: every event's struct), so it is a speed probe, not a reader.

    python -m venv /tmp/msv && /tmp/msv/bin/pip install msgspec==0.22.0 orjson
    /tmp/msv/bin/python benchmarks/json_decoders.py [TRACE ...] [--out benchmarks/results/json_decoders.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import time
from pathlib import Path
from typing import Union

import msgspec
import orjson

REPO = Path(__file__).resolve().parents[1]
DEFAULT = [REPO / "examples" / "h200" / "flashinfer_decode_sweep.pt.trace.json.gz"]


class Event(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Union[int, str, None] = None  # noqa: UP007 (msgspec reads the annotation at run time)
    tid: Union[int, str, None] = None  # noqa: UP007
    ts: Union[float, None] = None  # noqa: UP007
    dur: Union[float, None] = None  # noqa: UP007
    args: msgspec.Raw = msgspec.Raw(b"")


class Document(msgspec.Struct):
    traceEvents: list[Event] = []  # noqa: N815, RUF012 (the trace's own key)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path, default=DEFAULT)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    decoder = msgspec.json.Decoder(Document)
    results = []
    for path in args.traces:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        mb = len(raw) / 1e6
        full, typed = [], []
        kept = events = 0
        for _ in range(args.runs):
            t0 = time.perf_counter()
            doc = orjson.loads(raw)
            full.append(time.perf_counter() - t0)
            events = len(doc["traceEvents"])
            del doc
            t0 = time.perf_counter()
            typed_doc = decoder.decode(raw)
            kept = sum(1 for e in typed_doc.traceEvents if e.cat != "cpu_op")
            typed.append(time.perf_counter() - t0)
            del typed_doc
        row = {"trace": path.name, "mb": round(mb, 1), "events": events, "kept_not_cpu_op": kept,
               "orjson_s": round(statistics.median(full), 3), "msgspec_typed_s": round(statistics.median(typed), 3),
               "orjson_mb_s": round(mb / statistics.median(full)), "msgspec_mb_s": round(mb / statistics.median(typed)),
               "load_avg": os.getloadavg()[0]}
        results.append(row)
        print(json.dumps(row))
    if args.out:
        args.out.write_text(json.dumps({"runs": args.runs, "msgspec": msgspec.__version__, "results": results},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
