"""The Kineto reader's msgspec path (`kineto_typed`) gives exactly the rows and skip counts of the orjson path
(`orjson.loads` + `kineto._read_events`) on the same text, and hands the text back (None) wherever msgspec would
read it otherwise than orjson: the real traces' kept events, hand-written events at the edges of JSON, and
randomly mutated real events.
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
from traceinsight.ingest import kineto, kineto_typed
from traceinsight.ingest.json_stream import ArrayStream, Repairs, byte_chunks

REAL = [*sorted(H200.glob("*.pt.trace.json.gz")), *sorted(FOREIGN.glob("*.json.gz")),
        *sorted((REPO / "examples").glob("*/*.pt.trace.json.gz"))]
SEP = b"\n  },\n  {"


def rows(t: kineto._Tables) -> tuple[Any, ...]:
    return t.kernels, t.memops, t.launches, t.ranges, dict(t.skipped)


def typed_rows(text: bytes, n: int) -> tuple[Any, ...] | None:
    """The msgspec path's rows of `text` (a JSON array of `n` objects), or None where it leaves the text to
    orjson."""
    events = kineto_typed.decode(text, n)
    if events is None:
        return None
    t = kineto._Tables()
    kineto_typed.read_typed(events, t)
    return rows(t)


def orjson_rows(text: bytes) -> tuple[Any, ...]:
    t = kineto._Tables()
    kineto._read_events(orjson.loads(text), t)
    return rows(t)


def _orjson_ok(text: bytes) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


def check(text: bytes, n: int) -> bool:
    """The msgspec path reads `text` (`n` elements) as the orjson path does, or leaves it; True when it read it.
    It never reads text orjson refuses. (repr: an int and the equal float differ.)"""
    got = typed_rows(text, n)
    if got is None:
        return False
    assert _orjson_ok(text)
    assert repr(got) == repr(orjson_rows(text))
    return True


def kept_texts(path: Path) -> list[tuple[bytes, int]]:
    """The kept elements of each batch of a trace, as `_read_batch` joins them, and their number."""
    stream = ArrayStream(path, byte_chunks(path, Repairs()), b"traceEvents")
    out = []
    for batch, kept in kineto._prepare(stream.batches()):
        if batch.sep is not None:
            pieces = kept[0] if kept is not None else kineto._kept_pieces(batch.data, batch.sep)
            out.append((b"[{" + b"},{".join(pieces) + b"}]", len(pieces)))
    return out


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name[:32])
def test_real_traces_take_the_msgspec_path_with_the_same_rows(path: Path) -> None:
    texts = kept_texts(path)
    assert texts
    assert all(check(text, n) for text, n in texts)


KERNEL = ('"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2.25, "args": '
          '{"device": 0, "stream": 7, "correlation": 5, "grid": [1, 2, 3], "block": [4, 1, 1], '
          '"registers per thread": 32, "shared memory": 0, "queued": 0}')
LAUNCH = ('"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, "ts": 9.0, '
          '"dur": 1, "args": {"correlation": 5, "cbid": 211}')


def doc(*events: str) -> tuple[bytes, int]:
    """A JSON array of the objects with these insides, and their number."""
    return ("[{" + "},{".join(events) + "}]").encode(), len(events)


def bytes_in(d: tuple[bytes, int], old: bytes, new: bytes) -> tuple[bytes, int]:
    return d[0].replace(old, new), d[1]


# Events at the edges of JSON and of the tables' checks, each with whether the msgspec path takes it.
EDGES: dict[str, tuple[tuple[bytes, int], bool]] = {
    "plain": (doc(KERNEL, LAUNCH), True),
    "non-ascii name": (doc(KERNEL.replace('"k"', '"k\u00e9\u4e2d"'), LAUNCH), True),
    "escaped key": (doc(KERNEL.replace('"cat"', '"c\\u0061t"')), False),
    "escaped value": (doc(KERNEL.replace('"k"', '"k\\u00e9"')), False),
    "other escapes": (doc(KERNEL.replace('"k"', '"k\\"\\\\\\/\\n"')), True),
    "invalid utf-8 in a skipped field": (bytes_in(doc(KERNEL), b'"queued": 0', b'"queued": "\xff"'), False),
    "surrogate bytes in a skipped field": (bytes_in(doc(KERNEL), b'"queued": 0', b'"queued": "\xed\xa0\x80"'),
                                           False),
    "400-digit integer in a skipped field": (doc(KERNEL.replace('"queued": 0', '"queued": ' + "9" * 400)), False),
    "5000-digit integer in a skipped field": (doc(KERNEL.replace('"queued": 0', '"queued": ' + "9" * 5000)), False),
    "400-digit ts": (doc(KERNEL.replace('"ts": 10.5', '"ts": ' + "9" * 400)), False),
    "overflowing float in a skipped field": (doc(KERNEL.replace('"queued": 0', '"queued": 1e400')), False),
    "overflowing float, big mantissa": (doc(KERNEL.replace('"queued": 0', '"queued": 123456789012345678E+300')), False),
    "underflowing float": (doc(KERNEL.replace('"queued": 0', '"queued": 1e-400')), True),
    "NaN": (doc(KERNEL.replace('"dur": 2.25', '"dur": NaN')), False),
    "Infinity in a skipped field": (doc(KERNEL.replace('"queued": 0', '"queued": Infinity')), False),
    "25-digit integers": (doc(*(KERNEL.replace(f'"{k}": {v}', f'"{k}": 1234567890123456789012345') for k, v in
                                (("device", 0), ("stream", 7), ("correlation", 5), ("ts", 10.5), ("pid", 0))),
                              LAUNCH.replace('"correlation": 5', '"correlation": -98765432109876543210')), True),
    "u64 and i64 edges": (doc(KERNEL.replace('"correlation": 5', '"correlation": 18446744073709551615'),
                              KERNEL.replace('"correlation": 5', '"correlation": -9223372036854775808'),
                              KERNEL.replace('"stream": 7', '"stream": 9223372036854775807')), True),
    "repeated keys": (doc(KERNEL + ', "cat": "gpu_memcpy"', KERNEL.replace('"args": {', '"args": 5, "args": {'),
                          KERNEL + ', "args": [1]', KERNEL.replace('"device": 0', '"device": 3, "device": null')),
                      True),
    "args not an object": (doc(*(KERNEL.split('"args"')[0] + f'"args": {v}' for v in
                                 ("null", "[1, 2]", '"s"', "7", "1.5", "true", "12345678901234567890123"))), True),
    "no args, device null or missing": (doc(KERNEL.split(', "args"')[0], KERNEL.replace('"device": 0, ', ''),
                                            KERNEL.replace('"device": 0', '"device": null')), True),
    "memory operations": (doc('"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 1, "tid": "stream 7", '
                              '"ts": 1, "dur": 2, "args": {"inDevice": 2, "bytes": 4096, "correlation": 5}',
                              '"ph": "X", "cat": "Memset", "name": "Memset", "pid": 1, "tid": 7, "ts": 1, "dur": 2, '
                              '"args": {"device": null, "inDevice": 2, "bytes": 1.0}'), True),
    "2021 format and odd ids": (doc('"ph": "X", "cat": "Kernel", "name": "k", "pid": "1", "tid": "stream 7", '
                                    '"ts": 1604000000000000, "dur": 3',
                                    '"ph": "X", "cat": "Runtime", "name": "cudaLaunch", "pid": "25738", "tid": "x", '
                                    '"ts": 1, "dur": 1, "args": {"correlation": 2.0}',
                                    '"ph": "X", "cat": "Operator", "name": "ProfilerStep#3", "pid": 1, "tid": "25738", '
                                    '"ts": 1, "dur": 9',
                                    '"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, '
                                    '"dur": 1'), True),
    "annotations": (doc('"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 2, '
                        '"ts": 0, "dur": 5', '"ph": "X", "cat": "gpu_user_annotation", "name": "decode", "pid": 0, '
                        '"tid": 7, "ts": 0, "dur": 5, "args": {"device": "0", "stream": null}'), True),
    "skips": (doc(KERNEL.replace('"name": "k"', '"name": 5'), KERNEL.replace('"ts": 10.5', '"ts": "1"'),
                  KERNEL.replace('"dur": 2.25', '"dur": -1'), KERNEL.replace('"ts": 10.5', '"ts": 1e30'),
                  KERNEL.replace('"ts": 10.5', '"ts": -0.0'), KERNEL.replace('"ph": "X"', '"ph": "f"'),
                  KERNEL.replace('"cat": "kernel"', '"cat": null'), '"cat": "kernel"'), True),
    "deeply nested skipped field": (doc(KERNEL.replace('"queued": 0', '"queued": ' + "[" * 1010 + "]" * 1010)),
                                    False),
}


@pytest.mark.parametrize("name", list(EDGES))
def test_edges_of_json(name: str) -> None:
    (text, n), typed = EDGES[name]
    assert check(text, n) is typed


def test_msgspec_never_reads_what_orjson_refuses() -> None:
    """Text orjson refuses goes to the orjson path (its repairs and one-line errors), whatever msgspec makes of
    it: numbers of every length and exponent, in a field the tables read and in one msgspec skips."""
    rng = random.Random(13)
    digits = "0123456789"
    taken = 0
    for _ in range(4000):
        n = rng.choice([1, 2, 17, 20, 21, 40, 99, 100, 310, 400])
        s = rng.choice(["", "-"]) + rng.choice("123456789") + "".join(rng.choice(digits) for _ in range(n - 1))
        if rng.random() < 0.5:
            s += "." + "".join(rng.choice(digits) for _ in range(rng.choice([1, 3, 17, 300])))
        if rng.random() < 0.5:
            s += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.choice([0, 5, 99, 290, 308, 309, 400]))
        field = rng.choice(['"queued": 0', '"ts": 10.5', '"correlation": 5'])
        taken += check(*doc(KERNEL.replace(field, field.split(":")[0] + ": " + s)))
    assert taken > 1000


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
    events = [e for e in trace["traceEvents"] if e.get("cat") in kineto._DISPATCH]
    rng = random.Random(7)
    taken = 0
    for _ in range(300):
        taken += check(*doc(*(mutate(rng.choice(events), rng) for _ in range(20))))
    assert taken == 300


def test_the_stream_reader_gives_the_rows_of_the_document_reader(tmp_path: Path) -> None:
    """Whole files through `kineto.read` (the typed path) and `from_document(load_json)` (orjson), in Kineto's
    layout, with the edge events above that both read."""
    header = b'{\n  "schemaVersion": 1,\n  "traceEvents": [\n  {'
    for name, ((text, _), _) in EDGES.items():
        if not _orjson_ok(text):
            continue
        body = text[2:-2].replace(b"},{", SEP)
        p = tmp_path / "edge.json"
        p.write_bytes(header + body + b"\n  }\n  ]\n}\n")
        expected = kineto.from_document(kineto.load_json(p), p)
        got = kineto.read(p)
        assert got is not None, name
        assert (got.tables, got.warnings) == (expected.tables, expected.warnings), name


def test_invalid_utf8_in_a_kept_event_is_the_same_one_line_error(tmp_path: Path) -> None:
    body, _ = doc(KERNEL, KERNEL.replace('"queued": 0', '"queued": "?"'))
    events = body[2:-2].replace(b"},{", SEP).replace(b'"?"', b'"\xff"')
    raw = b'{\n  "traceEvents": [\n  {' + events + b"\n  }\n  ]\n}\n"
    p = tmp_path / "bad.json"
    p.write_bytes(raw)
    at = raw.index(b"\xff")
    with pytest.raises(FormatError) as err:
        kineto.read(p)
    assert str(err.value) == f"{p}: not valid UTF-8 at byte {at} (JSON traces are UTF-8 text)"
