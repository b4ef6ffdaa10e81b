"""The streaming Kineto reader (`kineto.read`) gives exactly the rows of the whole-document reader
(`from_document(load_json(path))`), whatever the layout of the JSON text and wherever chunk boundaries fall.

The inputs are the real traces, as written by Kineto and re-serialized in other layouts real tools produce
(compact, `json.dump(indent=...)` with the header keys after `traceEvents`, CRLF line ends, gzip). Chunks are
shrunk to a few KB so that every batch boundary, the array's end and the keys after it cross chunk boundaries.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FOREIGN, H200

from traceinsight.ingest import byte_stream, json_stream, kineto, kineto_prefilter

SMALL = H200 / "flashinfer_decode_small.pt.trace.json.gz"
TRACES = [SMALL, FOREIGN / "hta_a100_alexnet_critical_path_trace.json.gz",
          FOREIGN / "tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"]


def same(a: Any, b: Any) -> None:
    assert b is not None
    assert (a.format, a.format_version, a.tool_version) == (b.format, b.format_version, b.tool_version)
    assert a.warnings == b.warnings
    assert a.tables == b.tables


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(byte_stream, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(byte_stream, "READ_BYTES", 1024)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:24])
def test_as_written(path: Path, small_chunks: None, tmp_path: Path) -> None:
    expected = kineto.from_document(kineto.load_json(path), path)
    same(expected, kineto.read(path))
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    same(expected, kineto.read(plain))


def layouts(doc: dict[str, Any]) -> dict[str, bytes]:
    events = doc["traceEvents"]
    header = {k: v for k, v in doc.items() if k != "traceEvents"}
    last = {"traceEvents": events, **header}  # header keys (deviceProperties, ...) after the events
    indented = json.dumps(last, indent=2).encode()
    return {
        "compact": json.dumps(doc, separators=(",", ":")).encode(),
        "json.dumps": json.dumps(doc).encode(),
        "indent2_header_last": indented,
        "indent4": json.dumps(doc, indent=4).encode(),
        "crlf": indented.replace(b"\n", b"\r\n"),
        "tabs": json.dumps(last, indent="\t").encode(),
    }


@pytest.mark.parametrize("name", ["compact", "json.dumps", "indent2_header_last", "indent4", "crlf", "tabs"])
def test_other_layouts(name: str, small_chunks: None, tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress(SMALL.read_bytes()))
    p = tmp_path / f"{name}.json"
    p.write_bytes(layouts(doc)[name])
    expected = kineto.from_document(kineto.load_json(p), p)
    assert len(expected.tables["kernels"]["name"]) == 48
    same(expected, kineto.read(p))


def test_empty_and_odd_arrays(tmp_path: Path) -> None:
    p = tmp_path / "empty.json"
    p.write_bytes(b'{"schemaVersion": 1, "traceEvents": [ \n ], "deviceProperties": []}')
    same(kineto.from_document(kineto.load_json(p), p), kineto.read(p))
    p.write_bytes(b'{"traceEvents": [1, "x", {"cat": "kernel"}]}')  # elements that are not events
    same(kineto.from_document(kineto.load_json(p), p), kineto.read(p))
    p.write_bytes(b'[{"tc": 0, "B": 8}]')  # not an object with traceEvents: left to the whole-document reader
    assert kineto.read(p) is None
    p.write_bytes(b'{"traceEvents": {"ph": "X"}}')
    assert kineto.read(p) is None


def test_skipped_categories_are_never_parsed(tmp_path: Path) -> None:
    """An operator (cpu_op) event with a defect is dropped before parsing: no repair is reported, and the rows
    are those of the clean trace, but for that operator's host_ops row (its duration is not a number). (The first
    element of each batch is always parsed: the trace is one batch here, and the damaged event is the 50th
    operator.)"""
    text = gzip.decompress(SMALL.read_bytes())
    assert text.count(b'"cat": "cpu_op"') > 100
    at = 0
    for _ in range(50):
        at = text.index(b'"cat": "cpu_op"', at + 1)
    dur = text.index(b'"dur": ', at) + len(b'"dur": ')
    end = text.index(b",", dur)
    damaged = text[:dur] + b"inf" + text[end:]
    p = tmp_path / "damaged_cpu_op.json"
    p.write_bytes(damaged)
    clean = kineto.read(SMALL)
    got = kineto.read(p)
    assert got is not None and clean is not None
    ops, clean_ops = got.tables.pop("host_ops"), clean.tables.pop("host_ops")
    assert got.tables == clean.tables and got.warnings == []
    assert len(ops["op_id"]) == len(clean_ops["op_id"]) - 1
    assert ops["start_ns"].to_pylist() == [s for i, s in enumerate(clean_ops["start_ns"].to_pylist()) if i != 49]


def test_workers_give_the_same_rows(tmp_path: Path) -> None:
    path = H200 / "flashinfer_decode_sweep.pt.trace.json.gz"
    plain = tmp_path / "sweep.json"
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    same(kineto.read(plain, workers=0), kineto.read(plain, workers=2))


# Pieces of text that the scans decide on: separators of two layouts, braces and brackets with whitespace, the
# first keys of skipped and kept events, ProfilerStep names, NUL.
_TOKENS = [b"\n  },\n  {", b"\n    },\n    {", b"}", b"]", b"}]", b"} ]", b"}\n]", b",", b"{", b" ", b"\n", b"\t",
           b'\n    "ph": "X", "cat": "cpu_op", "name": "', b'\n    "ph": "X", "cat": "kernel", "name": "',
           b'\n    "ph": "f", "id": 1,', b'\n    "ph": "X", "cat": "python_function", "name": "',
           b"ProfilerStep#3", b"Profiler", b'"x"', b"1",
           b'\n    "ph": "X', b'", "cat": "ac2g", ', b'", "cat": "cpu_op", "name": "']  # strings left open


@pytest.mark.parametrize("seed", range(6))
def test_numpy_scans_match_the_byte_scans(seed: int) -> None:
    """`_kept_spans` (numpy, the scanning thread) gives exactly `_kept_pieces` and the element count, and
    `_closes_array` exactly the regular expression, on random texts made of the tokens they decide on and on
    slices of the real trace; None (left to `_kept_pieces`) only on odd text."""
    import random

    rng = random.Random(seed)
    real = gzip.decompress(SMALL.read_bytes())
    texts = [real[i : i + 200_000] for i in range(0, len(real), 150_000)]
    tokens = [_TOKENS, [*_TOKENS, b"\x00"]]
    for i in range(400):
        body = (rng.choice(tokens[i % 10 == 0]) for _ in range(rng.randint(1, 400)))
        texts.append(rng.choice([b"{", b"\n  {", b""]) + b"".join(body))
    decided = 0
    known: dict[bytes, dict[bytes, bool]] = {}  # prefixes learned from the texts before, as `kineto._prepare` does
    for data in texts:
        braces = json_stream._braces(data)
        assert json_stream._closes_array(data, braces) == (json_stream._ARRAY_END.search(data) is not None)
        for sep in (b"\n  },\n  {", b"\n    },\n    {"):
            kept = kineto_prefilter._kept_spans(data, sep, braces)
            before = dict(known.setdefault(sep, {}))
            kept_known = kineto_prefilter._kept_spans(data, sep, braces, known[sep])
            if kept is None:
                continue
            decided += 1
            assert kept == (kineto_prefilter._kept_pieces(data, sep), data.count(sep) + 1)
            if kept_known is not None:
                assert kept_known == (kineto_prefilter._kept_pieces(data, sep, before), data.count(sep) + 1)
    assert decided > 100


def _open_string_across_a_separator(text: bytes, at: int) -> bytes:
    """`text` (a Kineto trace) with the cpu_op event at or after `at` cut to an unterminated "ph" string, and the
    event after it missing up to where the string would close: the string runs across the separator between them
    (lenient JSON reads one event, a cpu_op, with the separator inside its "ph")."""
    sep = b"\n  },\n  {"
    start = text.index(sep + b'\n    "ph": "X", "cat": "cpu_op", "name": "', at)
    after = text.index(sep, text.index(sep, start + 1) + 1)
    return (text[:start] + sep + b'\n    "ph": "X' + sep + b'", "cat": "cpu_op", "name": "aten::lost", "pid": 1, '
            b'"tid": 1, "ts": 1.5, "dur": 1.0' + text[after:])


def test_a_string_left_open_across_a_separator_is_read_alike(tmp_path: Path) -> None:
    """A "ph" string left open across a separator: `_kept_spans`, `_kept_pieces` and the regular expression's
    scan (`_kept_pieces_slow`) keep the same elements (a learned prefix ran across the separator, so that
    `_kept_pieces` hid the element after it where `_kept_spans` kept it), and the serial reader (numpy) and the
    workers (`_kept_pieces`) give the same rows and warnings (with a damaged number in a skipped event of the same
    batch, the serial reader reported its repair and the workers did not)."""
    sep = b"\n  },\n  {"
    data = (b'{\n    "ph": "X", "cat": "kernel", "name": "k1", "ts": 1' + sep + b'\n    "ph": "X' + sep
            + b'", "cat": "cpu_op", "name": "aten::lost", "ts": 2' + sep + b'\n    "ph": "X", "cat": "kernel", '
            b'"name": "k2", "ts": 3\n  }')
    spans = kineto_prefilter._kept_spans(data, sep, json_stream._braces(data))
    assert spans is not None
    assert spans == (kineto_prefilter._kept_pieces(data, sep), 4)
    assert spans[0] == kineto_prefilter._kept_pieces_slow(data, sep)
    assert len(spans[0]) == 4  # every separator starts an element: nothing is skipped by a prefix across one

    text = gzip.decompress(SMALL.read_bytes())
    damaged = _open_string_across_a_separator(text, 20_000)
    cpu_op = damaged.index(b'"cat": "cpu_op"', damaged.index(b'"aten::lost"') + 5000)
    dur = damaged.index(b'"dur": ', cpu_op) + len(b'"dur": ')
    for name, body in (("open.json", damaged), ("open_inf.json", damaged[:dur] + b"inf" + damaged[
            damaged.index(b",", dur):])):
        p = tmp_path / name
        p.write_bytes(body)
        serial = kineto.read(p, workers=0)
        assert serial is not None
        same(serial, kineto.read(p, workers=2))
        clean = kineto.read(SMALL)
        assert clean is not None
        ops, clean_ops = serial.tables.pop("host_ops"), clean.tables.pop("host_ops")
        assert serial.tables == clean.tables  # the events lost (and the one with inf) were cpu_ops: host_ops only
        starts = ops["start_ns"].to_pylist()
        assert 0 < len(clean_ops["op_id"]) - len(starts) <= 3 and set(starts) <= set(clean_ops["start_ns"].to_pylist())


def test_prefixes_learned_across_batches(tmp_path: Path) -> None:
    """A batch whose first 64 KB hold no operator still skips the operators after them (the prefix was learned
    from an earlier batch), a damaged one included: no repair is reported, by the serial reader and the workers
    alike (a reader learning from each batch alone parsed it and repaired its `inf`)."""
    def event(cat: str, i: int, dur: str = "1.5") -> str:
        return (f'\n    "ph": "X", "cat": "{cat}", "name": "{cat}_{i % 7}", "pid": 1, "tid": 7,\n    "ts": {i}.25, '
                f'"dur": {dur},\n    "args": {{\n      "device": 0, "stream": 7, "correlation": {i}\n    }}')
    events = [event("cpu_op", i) for i in range(3000)]
    events += [event("kernel", i) for i in range(3000, 9000)]
    events += [event("cpu_op", 9000, dur="inf")]  # damaged
    events += [event("kernel", i) for i in range(9001, 20000)]
    text = '{\n  "schemaVersion": 1,\n  "traceEvents": [\n  {' + "\n  },\n  {".join(events) + "\n  }\n  ]\n}\n"
    p = tmp_path / "sections.json"
    p.write_bytes(text.encode())
    stream = json_stream.ArrayStream(p, byte_stream.byte_chunks(p, byte_stream.Repairs()), b"traceEvents")
    holder = [b for b in stream.batches() if b'"dur": inf' in b.data]
    assert len(holder) == 1 and holder[0].sep is not None  # a batch cut at separators, not the array's last
    assert b'"cpu_op"' not in holder[0].data[: kineto_prefilter.SAMPLE_BYTES]
    assert holder[0].data.index(b'"dur": inf') > kineto_prefilter.SAMPLE_BYTES
    serial = kineto.read(p, workers=0)
    assert serial is not None
    assert serial.warnings == []
    assert len(serial.tables["kernels"]["name"]) == 16999
    same(serial, kineto.read(p, workers=2))
