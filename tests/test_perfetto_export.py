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


def test_perfetto_export_holds_kernels_steps_and_one_track_per_root_cause(tmp_path: Path) -> None:
    out = tmp_path / "demo.perfetto.json"
    r = CliRunner().invoke(main, ["analyze", str(DEMO), "--meta", str(DEMO_META), "--format", "perfetto",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    doc = _strict(out.read_text(encoding="utf-8"))
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
