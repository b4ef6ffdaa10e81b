"""The Kineto reader's row loop (`kineto_events.read_events`, with its appends bound once and its integer columns'
common case tested inline) gives exactly the rows and skip counts of the plain loop it replaced (`plain_rows`,
kept here as the reference), on the kept events of the real traces, on hand-written events at the edges of the
tables' checks, and on randomly mutated real events; and the streaming reader, which keeps what it learned about
skipped events across batches, gives the rows of the whole-document reader on files of those events.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import FOREIGN, H200, REPO

from traceinsight.errors import FormatError
from traceinsight.ingest import kineto, kineto_batch, kineto_events
from traceinsight.ingest.byte_stream import Repairs, byte_chunks
from traceinsight.ingest.host_ops import HostOps
from traceinsight.ingest.json_stream import ArrayStream
from traceinsight.ingest.kineto_events import (
    _INT64,
    _KERNEL,
    _LAUNCH,
    _MEMOP,
    _STEP_OP,
    DISPATCH,
    FLOW_PHASES,
    LAUNCH_COLUMNS,
    MEMOP_CATS,
    PROFILER_STEP_PREFIX,
    RANGE_CATS,
    i32,
    i64,
    os_id,
    stream_of_tid,
)

REAL = [*sorted(H200.glob("*.pt.trace.json.gz")), *sorted(FOREIGN.glob("*.json.gz")),
        *sorted((REPO / "examples").glob("*/*.pt.trace.json.gz"))]
SEP = b"\n  },\n  {"


def rows(t: kineto_events.Tables) -> str:
    """Everything the loop fills, as text (repr: an int and the equal float differ)."""
    return repr((t.kernels, t.memops, t.launches, t.ranges, sorted(t.skipped.items()), t.names))


def check(text: bytes) -> None:
    events = orjson.loads(text)
    fast, plain = kineto_events.Tables(), kineto_events.Tables()
    kineto_events.read_events(events, fast)
    plain_rows(events, plain)
    assert rows(fast) == rows(plain)


def kept_texts(path: Path) -> list[bytes]:
    """The kept elements of each batch of a trace, as `kineto_batch.batch_events` joins them."""
    stream = ArrayStream(path, byte_chunks(path, Repairs()), b"traceEvents")
    out = []
    for _batch, kept in kineto._prepare(stream.batches(), HostOps()):
        if kept is not None:
            out.append(kineto_batch.joined(kept[0]))
    return out


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name[:32])
def test_real_traces(path: Path) -> None:
    texts = kept_texts(path)
    assert texts
    for text in texts:
        check(text)


KERNEL = ('"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2.25, "args": '
          '{"device": 0, "stream": 7, "correlation": 5, "grid": [1, 2, 3], "block": [4, 1, 1], '
          '"registers per thread": 32, "shared memory": 0, "queued": 0}')
LAUNCH = ('"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, "ts": 9.0, '
          '"dur": 1, "args": {"correlation": 5, "cbid": 211}')


def doc(*events: str) -> bytes:
    """A JSON array of the objects with these insides."""
    return ("[{" + "},{".join(events) + "}]").encode()


# Events at the edges of the tables' checks (odd types, sizes, repeated and missing keys).
EDGES: dict[str, bytes] = {
    "plain": doc(KERNEL, LAUNCH),
    "non-ascii name": doc(KERNEL.replace('"k"', '"k\u00e9\u4e2d"'), LAUNCH),
    "escaped key": doc(KERNEL.replace('"cat"', '"c\\u0061t"')),
    "escaped value": doc(KERNEL.replace('"k"', '"k\\u00e9"')),
    "other escapes": doc(KERNEL.replace('"k"', '"k\\"\\\\\\/\\n"')),
    "underflowing float": doc(KERNEL.replace('"queued": 0', '"queued": 1e-400')),
    "25-digit integers": doc(*(KERNEL.replace(f'"{k}": {v}', f'"{k}": 1234567890123456789012345') for k, v in
                                (("device", 0), ("stream", 7), ("correlation", 5), ("ts", 10.5), ("pid", 0))),
                              LAUNCH.replace('"correlation": 5', '"correlation": -98765432109876543210')),
    "u64 and i64 edges": doc(KERNEL.replace('"correlation": 5', '"correlation": 18446744073709551615'),
                              KERNEL.replace('"correlation": 5', '"correlation": -9223372036854775808'),
                              KERNEL.replace('"stream": 7', '"stream": 9223372036854775807')),
    "int32 edges": doc(KERNEL.replace('"registers per thread": 32', '"registers per thread": 2147483648')
                       .replace('"shared memory": 0', '"shared memory": -2147483649')
                       .replace('"grid": [1, 2, 3]', '"grid": [2147483647, 2147483648, -2147483648]')
                       .replace('"device": 0', '"device": 2147483648'),
                       KERNEL.replace('"block": [4, 1, 1]', '"block": [4.0, 1.5, true]')
                       .replace('"registers per thread": 32', '"registers per thread": -2147483648')
                       .replace('"device": 0', '"device": 2147483647.0')),
    "repeated keys": doc(KERNEL + ', "cat": "gpu_memcpy"', KERNEL.replace('"args": {', '"args": 5, "args": {'),
                          KERNEL + ', "args": [1]', KERNEL.replace('"device": 0', '"device": 3, "device": null')),
    "args not an object": doc(*(KERNEL.split('"args"')[0] + f'"args": {v}' for v in
                                 ("null", "[1, 2]", '"s"', "7", "1.5", "true", "12345678901234567890123"))),
    "no args, device null or missing": doc(KERNEL.split(', "args"')[0], KERNEL.replace('"device": 0, ', ''),
                                            KERNEL.replace('"device": 0', '"device": null')),
    "memory operations": doc('"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 1, "tid": "stream 7", '
                              '"ts": 1, "dur": 2, "args": {"inDevice": 2, "bytes": 4096, "correlation": 5}',
                              '"ph": "X", "cat": "Memset", "name": "Memset", "pid": 1, "tid": 7, "ts": 1, "dur": 2, '
                              '"args": {"device": null, "inDevice": 2, "bytes": 1.0}'),
    "2021 format and odd ids": doc('"ph": "X", "cat": "Kernel", "name": "k", "pid": "1", "tid": "stream 7", '
                                    '"ts": 1604000000000000, "dur": 3',
                                    '"ph": "X", "cat": "Runtime", "name": "cudaLaunch", "pid": "25738", "tid": "x", '
                                    '"ts": 1, "dur": 1, "args": {"correlation": 2.0}',
                                    '"ph": "X", "cat": "Operator", "name": "ProfilerStep#3", "pid": 1, "tid": "25738", '
                                    '"ts": 1, "dur": 9',
                                    '"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, '
                                    '"dur": 1'),
    "annotations": doc('"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 2, '
                        '"ts": 0, "dur": 5', '"ph": "X", "cat": "gpu_user_annotation", "name": "decode", "pid": 0, '
                        '"tid": 7, "ts": 0, "dur": 5, "args": {"device": "0", "stream": null}'),
    "skips": doc(KERNEL.replace('"name": "k"', '"name": 5'), KERNEL.replace('"ts": 10.5', '"ts": "1"'),
                  KERNEL.replace('"dur": 2.25', '"dur": -1'), KERNEL.replace('"ts": 10.5', '"ts": 1e30'),
                  KERNEL.replace('"ts": 10.5', '"ts": -0.0'), KERNEL.replace('"ph": "X"', '"ph": "f"'),
                  KERNEL.replace('"cat": "kernel"', '"cat": null'), '"cat": "kernel"'),
    "deeply nested skipped field": doc(KERNEL.replace('"queued": 0', '"queued": ' + "[" * 1010 + "]" * 1010)),
}


@pytest.mark.parametrize("name", list(EDGES))
def test_edges(name: str) -> None:
    check(EDGES[name])


# Values put in the fields the tables read, and keys dropped or repeated, by the random test.
VALUES = ["null", "true", "0", "-0", "-0.0", "7", "1.5", "2.0", "-3", "1e30", "1e-300", "4294967296", "2147483648",
          "-2147483649", "9223372036854775808", "123456789012345678901234567890", '"7"', '"stream 7"', '"stream x"',
          '"25738"', '""', '"kernel"', '"ProfilerStep#2"', "[1, 2, 3]", "[1.0, 2, 3]", "[1, 2]", '["1", 2, 3]', "{}",
          '{"a": 1}', "[]"]
FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]
ARGS = ["device", "inDevice", "stream", "grid", "block", "correlation", "registers per thread", "shared memory",
        "bytes"]
CATS = ["kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "cuda_runtime", "cuda_driver", "Runtime",
        "user_annotation", "gpu_user_annotation", "Operator", "cpu_op", "python_function"]


def mutate(event: dict[str, Any], rng: random.Random) -> str:
    """The JSON text of `event` with some fields replaced, dropped or repeated."""
    items = [(k, json.dumps(v)) for k, v in event.items()]
    args = event.get("args") if type(event.get("args")) is dict else {}
    arg_items = [(k, json.dumps(v)) for k, v in args.items()]
    for _ in range(rng.randint(1, 4)):
        kind = rng.random()
        if kind < 0.35:
            items.append((rng.choice(FIELDS), rng.choice(VALUES + [f'"{c}"' for c in CATS])))
        elif kind < 0.7:
            arg_items.append((rng.choice(ARGS), rng.choice(VALUES)))
        elif items:
            del items[rng.randrange(len(items))]
    if args and rng.random() < 0.8:
        items = [(k, v) for k, v in items if k != "args"]
        items.insert(rng.randrange(len(items) + 1),
                     ("args", "{" + ", ".join(f'"{k}": {v}' for k, v in arg_items) + "}"))
    return ", ".join(f'"{k}": {v}' for k, v in items)


def test_randomly_mutated_real_events() -> None:
    trace = json.loads(gzip.decompress((H200 / "flashinfer_decode_small.pt.trace.json.gz").read_bytes()))
    events = [e for e in trace["traceEvents"] if e.get("cat") in kineto_events.DISPATCH]
    rng = random.Random(7)
    for _ in range(300):
        check(doc(*(mutate(rng.choice(events), rng) for _ in range(20))))


def test_the_stream_reader_gives_the_rows_of_the_document_reader(tmp_path: Path) -> None:
    """Whole files of the edge events above through `kineto.read` (streamed, in Kineto's layout) and
    `from_document(load_json)`."""
    header = b'{\n  "schemaVersion": 1,\n  "traceEvents": [\n  {'
    for name, text in EDGES.items():
        body = text[2:-2].replace(b"},{", SEP)
        p = tmp_path / "edge.json"
        p.write_bytes(header + body + b"\n  }\n  ]\n}\n")
        expected = kineto.from_document(kineto.load_json(p), p)
        got = kineto.read(p)
        assert got is not None, name
        assert (got.tables, got.warnings) == (expected.tables, expected.warnings), name


def test_invalid_utf8_in_a_kept_event_is_the_same_one_line_error(tmp_path: Path) -> None:
    body = doc(KERNEL, KERNEL.replace('"queued": 0', '"queued": "?"'))
    events = body[2:-2].replace(b"},{", SEP).replace(b'"?"', b'"\xff"')
    raw = b'{\n  "traceEvents": [\n  {' + events + b"\n  }\n  ]\n}\n"
    p = tmp_path / "bad.json"
    p.write_bytes(raw)
    at = raw.index(b"\xff")
    with pytest.raises(FormatError) as err:
        kineto.read(p)
    assert str(err.value) == f"{p}: not valid UTF-8 at byte {at} (JSON traces are UTF-8 text)"


# ------------------------------------------------------------------ the reference
def plain_rows(events: list[Any], t: kineto_events.Tables) -> None:
    """`kineto_events.read_events` as it was before its columns' appends were bound and its integers tested inline
    (the reference the inlined loop is held to)."""
    dispatch = DISPATCH
    flows = FLOW_PHASES
    skipped = t.skipped
    intern = t.names.setdefault
    k, m, r = t.kernels, t.memops, t.ranges
    la_corr, la_name, la_start, la_end, la_pid, la_tid = (t.launches[c].append for c in LAUNCH_COLUMNS)
    lo, hi = -_INT64, _INT64
    empty: dict[str, Any] = {}
    not_objects = 0
    for e in events:
        if type(e) is not dict:
            not_objects += 1
            continue
        cat = e.get("cat")
        if type(cat) is not str:
            continue
        what = dispatch.get(cat)
        if what is None:
            continue
        ph = e.get("ph")
        if type(ph) is str and ph in flows:
            continue
        name = e.get("name")
        if type(name) is not str:
            if what != _STEP_OP:
                skipped[(cat, "missing or non-string name")] += 1
            continue
        if what == _STEP_OP and not name.startswith(PROFILER_STEP_PREFIX):
            continue
        # _span, inlined
        ts = e.get("ts")
        dur = e.get("dur")
        if (type(ts) is not float and type(ts) is not int) or (type(dur) is not float and type(dur) is not int):
            skipped[(cat, "missing or non-numeric ts/dur")] += 1
            continue
        try:
            start = round(ts * 1000)
            end = round(dur * 1000)
        except (OverflowError, ValueError):
            skipped[(cat, "non-finite ts/dur")] += 1
            continue
        if end < 0:
            skipped[(cat, "negative duration")] += 1
            continue
        end += start
        if start < lo or end >= hi:
            skipped[(cat, "timestamp out of range")] += 1
            continue
        args = e.get("args")
        if type(args) is not dict:
            args = empty
        if what == _LAUNCH:
            corr = args.get("correlation")
            if type(corr) is not int or not lo <= corr < hi:
                corr = i64(corr)
                if corr is None:
                    continue
            pid, tid = e.get("pid"), e.get("tid")
            la_corr(corr)
            la_name(intern(name, name))
            la_start(start)
            la_end(end)
            la_pid(pid if type(pid) is int and lo <= pid < hi else os_id(pid))
            la_tid(tid if type(tid) is int and lo <= tid < hi else os_id(tid))
        elif what == _KERNEL:
            stream = args.get("stream")
            gx, gy, gz = dim3(args.get("grid"))
            bx, by, bz = dim3(args.get("block"))
            k["name"].append(intern(name, name))
            k["device_id"].append(i32(args.get("device", e.get("pid"))))
            k["stream_id"].append(i64(stream) if stream is not None else stream_of_tid(e.get("tid")))
            k["start_ns"].append(start)
            k["end_ns"].append(end)
            k["grid_x"].append(gx)
            k["grid_y"].append(gy)
            k["grid_z"].append(gz)
            k["block_x"].append(bx)
            k["block_y"].append(by)
            k["block_z"].append(bz)
            k["registers_per_thread"].append(i32(args.get("registers per thread")))
            k["smem_bytes"].append(i32(args.get("shared memory")))  # static + dynamic; Kineto gives only the sum
            k["correlation_id"].append(i64(args.get("correlation")))
        elif what == _MEMOP:
            stream = args.get("stream")
            # peer copies (CUpti_ActivityMemcpy2) name the executing device "inDevice"
            dev = args.get("device", args.get("inDevice", e.get("pid")))
            m["kind"].append(MEMOP_CATS[cat])
            m["name"].append(intern(name, name))
            m["device_id"].append(i32(dev))
            m["stream_id"].append(i64(stream) if stream is not None else stream_of_tid(e.get("tid")))
            m["start_ns"].append(start)
            m["end_ns"].append(end)
            m["bytes"].append(i64(args.get("bytes")))
            m["correlation_id"].append(i64(args.get("correlation")))
        else:
            kind, side = ("profiler_step", "cpu") if what == _STEP_OP else RANGE_CATS[cat]
            if side == "cpu" and name.startswith(PROFILER_STEP_PREFIX):
                kind = "profiler_step"
            r["name"].append(intern(name, name))
            r["kind"].append(kind)
            r["side"].append(side)
            r["start_ns"].append(start)
            r["end_ns"].append(end)
            if side == "cpu":
                r["process_id"].append(os_id(e.get("pid")))
                r["thread_id"].append(os_id(e.get("tid")))
                r["device_id"].append(None)
                r["stream_id"].append(None)
            else:
                dev = args.get("device", e.get("pid"))
                stream = args.get("stream")
                r["process_id"].append(None)
                r["thread_id"].append(None)
                r["device_id"].append(i32(dev))
                r["stream_id"].append(i64(stream) if stream is not None else stream_of_tid(e.get("tid")))
    if not_objects:
        skipped[("traceEvents", "not a JSON object")] += not_objects


def dim3(v: Any) -> tuple[int | None, int | None, int | None]:
    if type(v) is list and len(v) == 3:
        return i32(v[0]), i32(v[1]), i32(v[2])
    return None, None, None
