"""A probe for issue 13's 1 GB Kineto target: would msgspec speed up the events the streaming reader keeps?

`json_decoders.py` measured msgspec's typed decode against orjson on whole documents (227-272 against 59-91 MB/s).
The reader parses only the events it keeps (kernels, runtime calls, memory operations, annotations: about 15 % of
the bytes), and it must read them exactly as orjson does. This times, per GB of trace, on the kept text of each
batch as `kineto.read` joins it (CPU time, one thread, rounds interleaved, minimum and first quartile):

- `orjson.loads`, and `orjson.loads` + `kineto_events.read_events` (the reader's calling thread today);
- msgspec decoding the same text into structs of the fields the tables read (the rest skipped);
- the checks msgspec needs to be used only where it reads the text as orjson would: UTF-8 (msgspec does not
  validate the strings it skips), numbers past a double's range (orjson refuses them; msgspec skips them, or reads
  integers of any length), `\\u` escapes (msgspec matches no field to an escaped key such as `"c\\u0061t"`).

A whole typed reader (structs, these checks, a row loop over attributes) was built and measured on branch
kineto-msgspec (`traceinsight/ingest/kineto_typed.py` at 16e4455): with both row loops inlined alike it tied with
orjson (docs/SCALE.md). msgspec is not a dependency:

    .venv/bin/pip install msgspec==0.22.0
    PYTHONPATH=. .venv/bin/python -P benchmarks/kineto_kept_decoders.py TRACE [--rounds 25] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Union

import msgspec
import orjson

from traceinsight.ingest import kineto, kineto_batch, kineto_events
from traceinsight.ingest.byte_stream import Repairs, byte_chunks
from traceinsight.ingest.host_ops import HostOps
from traceinsight.ingest.json_stream import ArrayStream


class Args(msgspec.Struct, gc=False):
    device: Any = msgspec.UNSET
    inDevice: Any = msgspec.UNSET  # noqa: N815 (Kineto's key)
    stream: Any = None
    grid: Any = None
    block: Any = None
    correlation: Any = None
    registers: Any = msgspec.field(name="registers per thread", default=None)
    smem: Any = msgspec.field(name="shared memory", default=None)
    nbytes: Any = msgspec.field(name="bytes", default=None)


class Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: Union[Args, list[Any], str, int, float, bool, None] = None  # noqa: UP007 (read at run time)


DECODER = msgspec.json.Decoder(list[Event])
# Digits as 0, E as e, + deleted: 100 zeros in a row is a number msgspec may read where orjson refuses it, `0e000` a
# positive exponent of three digits or more (a double overflows only with one or the other).
SHAPES = bytes.maketrans(b"0123456789E", b"0000000000e")


def reads_alike(text: bytes) -> bool:
    """False where msgspec might accept `text` that orjson refuses, or read a key orjson reads otherwise."""
    if not text.isascii():
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            return False
    if b"\\" in text and b"\\u" in text:
        return False
    shapes = text.translate(SHAPES, b"+")
    return b"0" * 100 not in shapes and b"0e000" not in shapes


def kept_texts(path: Path) -> list[bytes]:
    stream = ArrayStream(path, byte_chunks(path, Repairs()), b"traceEvents")
    out = []
    for _batch, kept in kineto._prepare(stream.batches(), HostOps()):
        if kept is not None:
            out.append(kineto_batch.joined(kept[0]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    texts = kept_texts(args.trace)
    per_gb = 1e9 / args.trace.stat().st_size

    def rows() -> None:
        t = kineto_events.Tables()
        for text in texts:
            kineto_events.read_events(orjson.loads(text), t)

    cases: dict[str, Callable[[], Any]] = {
        "orjson.loads": lambda: [orjson.loads(x) for x in texts],
        "orjson.loads + kineto_events.read_events": rows,
        "msgspec typed decode": lambda: [DECODER.decode(x) for x in texts],
        "checks that msgspec reads as orjson": lambda: [reads_alike(x) for x in texts],
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    gc.disable()
    for _ in range(args.rounds):
        for name, fn in cases.items():
            c0 = time.process_time()
            fn()
            times[name].append((time.process_time() - c0) * per_gb)
    kept_mb = sum(map(len, texts)) / 1e6
    print(f"{args.trace} ({args.trace.stat().st_size / 1e6:.0f} MB, kept text {kept_mb:.1f} MB), "
          f"CPU-s per GB of trace, {args.rounds} rounds (load {os.getloadavg()[0]:.1f})")
    result = {}
    for name, ts in times.items():
        ts.sort()
        result[name] = {"min": round(ts[0], 3), "q1": round(ts[len(ts) // 4], 3)}
        print(f"  {name:40} min {ts[0]:6.3f}  q1 {ts[len(ts) // 4]:6.3f}")
    if args.out:
        args.out.write_text(json.dumps({"trace": str(args.trace), "kept_mb": round(kept_mb, 1),
                                        "msgspec": msgspec.__version__, "load1": os.getloadavg()[0],
                                        "cpu_s_per_gb": result}, indent=1) + "\n")


if __name__ == "__main__":
    main()
