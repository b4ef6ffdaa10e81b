"""Issue 14 item 6: `analyze --format perfetto` writes the findings on the timeline — a Chrome trace (JSON Trace Event
Format) with the trace's kernels, its steps and one slice per root cause on a track of its own.

Perfetto UI is a web app (ui.perfetto.dev) and its trace_processor fetches a binary at first use: neither can
load here offline, so the file is checked against the rules of the format Perfetto's JSON importer and
chrome://tracing read: strict JSON, `traceEvents`, complete events (`ph` X) with numeric `ts`/`dur` in us, integer
pid/tid, metadata events naming every process and thread; and against the analysis it comes from."""

from __future__ import annotations

import json
import math
from pathlib import Path

from click.testing import CliRunner

from traceinsight.cli.main import main
from traceinsight.pipeline import analyze

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "h200" / "flashinfer_decode_sweep.pt.trace.json.gz"
DEMO_META = REPO / "examples" / "h200" / "flashinfer_decode_sweep.meta.json.gz"


def _strict(text: str) -> object:
    def no_constants(name: str) -> object:
        raise AssertionError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=no_constants)


# The Trace Event Format (Google's "Trace Event Format" document, the JSON Object Format) as a JSON Schema, for
# the event types the export writes: complete events (ph X: name, ph, ts, dur in us, pid, tid; cat and args
# optional) and metadata events (ph M: process_name / thread_name, args.name; a process's without tid). Any other
# phase, a missing field or a field of the wrong type fails. displayTimeUnit is "ms" or "ns" (how a viewer shows
# times; timestamps stay us).
TRACE_EVENT_SCHEMA: dict[str, object] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"oneOf": [{"$ref": "#/$defs/complete"},
                                                              {"$ref": "#/$defs/process_name"},
                                                              {"$ref": "#/$defs/thread_name"}]}},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
    },
    "$defs": {
        "named": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
        "complete": {
            "type": "object",
            "required": ["name", "ph", "ts", "dur", "pid", "tid"],
            "properties": {"name": {"type": "string"}, "ph": {"const": "X"}, "cat": {"type": "string"},
                           "ts": {"type": "number"}, "dur": {"type": "number", "minimum": 0},
                           "pid": {"type": "integer"}, "tid": {"type": "integer"}, "args": {"type": "object"}},
        },
        "process_name": {
            "type": "object",
            "required": ["name", "ph", "pid", "args"],
            "not": {"required": ["tid"]},
            "properties": {"name": {"const": "process_name"}, "ph": {"const": "M"}, "pid": {"type": "integer"},
                           "args": {"$ref": "#/$defs/named"}},
        },
        "thread_name": {
            "type": "object",
            "required": ["name", "ph", "pid", "tid", "args"],
            "properties": {"name": {"const": "thread_name"}, "ph": {"const": "M"}, "pid": {"type": "integer"},
                           "tid": {"type": "integer"},
                           "args": {"$ref": "#/$defs/named"}},
        },
    },
}


def test_the_schema_refuses_what_the_format_does_not_allow() -> None:
    from jsonschema import Draft202012Validator  # altair's dependency (the [test] and [dashboard] extras)

    ok = {"traceEvents": [{"ph": "X", "name": "k", "ts": 1.5, "dur": 2, "pid": 1, "tid": 7},
                          {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "GPU"}}]}
    v = Draft202012Validator(TRACE_EVENT_SCHEMA)
    assert not list(v.iter_errors(ok))
    for broken in ({"ph": "X", "name": "k", "ts": 1.5, "pid": 1, "tid": 7},          # no dur
                   {"ph": "X", "name": "k", "ts": "1.5", "dur": 2, "pid": 1, "tid": 7},  # ts not a number
                   {"ph": "X", "name": "k", "ts": 1.5, "dur": 2, "pid": 1},          # no tid
                   {"ph": "M", "name": "thread_name", "pid": 1, "args": {}},         # no tid, no args.name
                   {"ph": "B", "name": "k", "ts": 1.5, "pid": 1, "tid": 7}):         # a phase it does not write
        assert list(v.iter_errors({"traceEvents": [broken]})), broken


def _nesting_errors(events: list[dict[str, object]]) -> list[str]:
    """Complete events of one track that overlap without one lying inside the other (viewers need them nested:
    speedscope stacks each such event on the one before it, Perfetto's importer drops it)."""
    tracks: dict[tuple[object, object], list[tuple[float, float, str]]] = {}
    for e in events:
        if e["ph"] == "X":
            t0, d = float(e["ts"]), float(e["dur"])  # type: ignore[arg-type]
            tracks.setdefault((e["pid"], e["tid"]), []).append((t0, t0 + d, str(e["name"])))
    bad = []
    for key, slices in tracks.items():
        stack: list[tuple[float, float, str]] = []
        for t0, t1, name in sorted(slices, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1][1] <= t0:
                stack.pop()
            if stack and t1 > stack[-1][1]:
                bad.append(f"{key}: {name} at {t0} overlaps {stack[-1][2]} ending {stack[-1][1]}")
            stack.append((t0, t1, name))
    return bad


def test_perfetto_export_holds_kernels_steps_and_one_track_per_root_cause(tmp_path: Path) -> None:
    from jsonschema import Draft202012Validator

    out = tmp_path / "demo.perfetto.json"
    r = CliRunner().invoke(main, ["analyze", str(DEMO), "--meta", str(DEMO_META), "--format", "perfetto",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    doc = _strict(out.read_text(encoding="utf-8"))
    schema = Draft202012Validator(TRACE_EVENT_SCHEMA)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in schema.iter_errors(doc)]
    assert not errors, errors[:5]
    # Kineto's kernel timestamps on one stream overlap by up to ~0.2 us (293 of the sweep's 1074 kernels), its
    # steps' wall times by 1 ns: written as they are, speedscope drew the stream as a staircase.
    assert not _nesting_errors(doc["traceEvents"])  # type: ignore[index]
    clipped = [e for e in doc["traceEvents"] if "trace_dur_us" in e.get("args", {})]  # type: ignore[index]
    assert clipped and all(e["args"]["trace_dur_us"] > e["dur"] for e in clipped)
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    events = doc["traceEvents"]
    named: dict[tuple[int, int | None], str] = {}
    for e in events:
        assert e["ph"] in ("X", "M"), e
        assert isinstance(e["pid"], int) and isinstance(e.get("tid", 0), int)
        assert isinstance(e["name"], str)
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name") and isinstance(e["args"]["name"], str)
            named[(e["pid"], e.get("tid"))] = e["args"]["name"]
        else:
            assert isinstance(e["ts"], float | int) and isinstance(e["dur"], float | int)
            assert math.isfinite(e["ts"]) and e["dur"] >= 0
            assert (e["pid"], None) in named and (e["pid"], e["tid"]) in named  # every track is named
    slices = [e for e in events if e["ph"] == "X"]
    _, (a,) = analyze([DEMO], meta=[DEMO_META], cache=False)
    kernels = [e for e in slices if e["pid"] == 1]
    steps = [e for e in slices if e["pid"] == 2]
    findings = [e for e in slices if e["pid"] == 3]
    assert len(kernels) == sum(k["count"] for k in a.kernels) == 1074
    assert len(steps) == len(a.steps) == 390
    roots = {f.id for f in a.findings if f.supports is None}
    assert {e["name"] for e in findings} == roots
    # One track per root cause, named with its severity.
    tracks = {named[(3, e["tid"])] for e in findings}
    assert "CRITICAL split-kv-off" in tracks and len(tracks) == len(roots)
    # The split-kv-off slices cover its 4 bursts of steps and carry the finding: summary, saving, remedy.
    off = [e for e in findings if e["name"] == "split-kv-off"]
    assert [(e["args"]["first_step"], e["args"]["last_step"]) for e in off] == [(66, 77), (105, 116), (144, 155),
                                                                              (180, 194)]
    assert off[0]["args"]["saving_ns"] == 452_528_116 and off[0]["args"]["remedy"].startswith("Keep decode")
    # Each finding slice lies over the kernels of its steps.
    by_name = {e["args"]["index"]: e for e in steps}
    for e in off:
        first, last = by_name[e["args"]["first_step"]], by_name[e["args"]["last_step"]]
        assert abs(e["ts"] - first["ts"]) < 1e-3 and abs(e["ts"] + e["dur"] - last["ts"] - last["dur"]) < 1e-3
    assert min(e["ts"] for e in kernels) <= min(e["ts"] for e in findings)


def test_perfetto_to_stdout_and_several_traces_refused(tmp_path: Path) -> None:
    small = REPO / "examples" / "h200" / "flashinfer_decode_small.pt.trace.json.gz"
    r = CliRunner().invoke(main, ["analyze", str(small), "--format", "perfetto"])
    assert r.exit_code == 0
    assert len(_strict(r.stdout)["traceEvents"]) > 48  # type: ignore[index]
    r = CliRunner().invoke(main, ["analyze", str(small), str(DEMO), "--format", "perfetto"])
    assert r.exit_code == 2 and "writes one trace" in r.stderr
