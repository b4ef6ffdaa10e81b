"""Host ops stored at ingest (ingest/host_ops.py, the host_ops table) equal what a full JSON parse finds, whatever
the reader (streamed, parsed whole, worker processes) and the layout; the analysis reads them from the database
after the file is gone."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from traceinsight.ingest import host_ops_scan, kineto, load
from traceinsight.ingest.base import Ingest
from traceinsight.ingest.byte_stream import Repairs, byte_chunks
from traceinsight.ingest.host_ops import _CATS, _OP, HostOps
from traceinsight.ingest.json_stream import ArrayStream, Batch
from traceinsight.pipeline import analyze_trace

Op = tuple[str, str, int, int, int, int]


def _parsed(events: list[dict[str, object]]) -> list[Op]:
    out = []
    for e in events:
        if e.get("cat") in ("cpu_op", "python_function") and e.get("ph") == "X":
            start = round(e["ts"] * 1000)  # type: ignore[operator]
            out.append((str(e["name"]), str(e["cat"]), start, start + round(e["dur"] * 1000),  # type: ignore[operator]
                        int(e["pid"]), int(e["tid"])))  # type: ignore[call-overload]
    return out


def _ops(ingest: Ingest) -> list[Op]:
    cols = ingest.lists("host_ops")
    assert cols["op_id"] == list(range(len(cols["op_id"])))
    return list(zip(cols["name"], cols["category"], cols["start_ns"], cols["end_ns"], cols["process_id"],
                    cols["thread_id"], strict=True))


def test_ops_equal_a_full_parse_streamed_whole_and_in_workers(h200: Path) -> None:
    path = h200 / "flashinfer_decode_small.pt.trace.json.gz"
    want = _parsed(json.loads(gzip.decompress(path.read_bytes()))["traceEvents"])
    assert len(want) > 1000
    assert _ops(kineto.read(path)) == want  # type: ignore[arg-type]
    assert _ops(kineto.read(path, workers=2)) == want  # type: ignore[arg-type]
    assert _ops(kineto.from_document(kineto.load_json(path), path)) == want


def test_one_pair_a_line_and_escaped_names_are_read(tmp_path: Path) -> None:
    """Pretty-printed (TraceLens writes its traces so), a name with an escaped quote, a pid written as a string."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": 'aten::to "copy"', "pid": "596", "tid": 7, "ts": 10.5, "dur": 2.25,
         "args": {"Input Dims": [[1, 2]]}},
        {"ph": "X", "cat": "python_function", "name": "engine.py(12): step", "pid": 596, "tid": 7, "ts": 9,
         "dur": 20.0005},
        {"ph": "i", "cat": "cpu_op", "name": "instant", "pid": 596, "tid": 7, "ts": 11, "s": "t"},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 11, "dur": 1, "args": {"device": 0}},
    ]
    path = tmp_path / "pretty.json"
    path.write_text(json.dumps({"traceEvents": events}, indent=2))
    want = [('aten::to "copy"', "cpu_op", 10500, 12750, 596, 7),
            ("engine.py(12): step", "python_function", 9000, 29000, 596, 7)]
    assert _ops(kineto.read(path)) == want  # type: ignore[arg-type]
    assert _ops(kineto.from_document(kineto.load_json(path), path)) == want


def test_the_analysis_reads_host_ops_from_the_database_after_the_file_is_gone(h200: Path, tmp_path: Path) -> None:
    path = tmp_path / "small.pt.trace.json.gz"
    shutil.copy(h200 / "flashinfer_decode_small.pt.trace.json.gz", path)
    want = _parsed(json.loads(gzip.decompress(path.read_bytes()))["traceEvents"])
    db, (trace,) = load([path], cache=False)
    path.unlink()
    analysis = analyze_trace(db, trace, diagnostics=False)
    assert analysis.host_ops is not None
    starts = sorted(s for _, _, s, _, _, _ in want)
    a, b = starts[len(starts) // 3], starts[2 * len(starts) // 3]
    windows = [(a - 1_000, a + 500_000), (b, b + 2_000_000)]
    got = analysis.host_ops(windows)
    ops = [(o.name, o.category, o.start_ns, o.end_ns, o.process_id, o.thread_id) for o in got
           if o.category in ("cpu_op", "python_function")]
    assert ops and ops == [op for op in want if any(op[2] < hi and lo < op[3] for lo, hi in windows)]
    every = analysis.host_ops([(starts[0], max(e for _, _, _, e, _, _ in want))])  # the CPU ranges first
    n = len(every) - len(want)
    assert n > 0 and {o.category for o in every[:n]} <= {"annotation", "profiler_step"}
    assert [o.start_ns for o in every[:n]] == sorted(o.start_ns for o in every[:n])
    assert analysis.host_ops([]) == []


@pytest.mark.parametrize("name", ["flashinfer_decode.sqlite"])
def test_nsys_host_ranges_come_through_the_same_query(h200: Path, name: str) -> None:
    db, (trace,) = load([h200 / name], cache=False)
    analysis = analyze_trace(db, trace, diagnostics=False)
    assert analysis.host_ops is not None
    got = analysis.host_ops([(analysis.start_ns, analysis.end_ns)])
    assert got and {o.category for o in got} == {"nvtx"}
    assert db.rows("SELECT count(*) AS n FROM host_ops")[0]["n"] == 0


def _batches(path: Path) -> list[Batch]:
    return list(ArrayStream(path, byte_chunks(path, Repairs(), cut_ok=True), b"traceEvents").batches())


def _scanned(batches: list[Batch], fast: bool) -> dict[str, object]:
    ops = HostOps()
    for b in batches:
        ops.scan(b.data, b.sep, b.braces) if fast else ops.scan(b.data)
    cols = ops.columns()
    assert cols is not None
    return {k: v.to_pylist() for k, v in cols.items()}


def test_numpy_read_of_kineto_batches_equals_the_regular_expression(h200: Path) -> None:
    batches = _batches(h200 / "flashinfer_decode_small.pt.trace.json.gz")
    decided = [host_ops_scan.read(b.data, b.sep, b.braces, _CATS, _OP) is not None for b in batches]
    assert sum(decided) >= len(batches) - 1  # all but the metadata tail, which holds no op
    assert _scanned(batches, fast=True) == _scanned(batches, fast=False)


_KINETO_OP = ('  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": 7,\n'
              '    "ts": {ts}, "dur": {dur},\n    "args": {{\n      "External id": 1\n    }}\n  }}')


@pytest.mark.parametrize(("field", "value", "decided"), [
    ("ts", "12.5", True), ("pid", '"596"', True), ("ts", "-0.0", True),
    ("ts", "1.25e3", False), ("dur", "12345678901234567.5", False), ("name", 'a\\"b', False),
    ("pid", '"596', False), ("name", "x" * 80, True),
])
def test_numpy_read_decides_only_what_it_reads_as_the_expression(tmp_path: Path, field: str, value: str,
                                                                 decided: bool) -> None:
    """Kineto's layout, one op of many written with the value given: read by numpy where it can say exactly what
    the expression reads, else left to the expression; the rows are the same either way."""
    ops = [dict(cat="cpu_op", name=f"aten::op{i % 5}" if i != 17 else "op17", pid=596, ts=f"{100 + i}.125",
                dur="2.5") for i in range(40)]
    ops[17][field] = value
    ops[23]["cat"] = "python_function"
    text = '{\n  "traceEvents": [\n' + ",\n".join(_KINETO_OP.format(**o) for o in ops) + "\n  ]\n}\n"
    path = tmp_path / "kineto.json"
    path.write_text(text)
    batches = _batches(path)
    assert b"op17" in batches[0].data or field == "name"
    assert (host_ops_scan.read(batches[0].data, batches[0].sep, batches[0].braces, _CATS, _OP) is not None) == decided
    fast, slow = _scanned(batches, fast=True), _scanned(batches, fast=False)
    assert fast == slow
    assert len(fast["op_id"]) >= 39  # type: ignore[arg-type]
