"""Root cause on real decode loops with known truth (examples/loop, collected on an H200 with `collect loop`):
every spike's cause and onset step match the event injected there, no attention cause where attention did not
grow, host stalls name what the host did, and mixed chunked-prefill launches are recognised.

The truth is each sidecar step's `truth` (examples/loop/README.md): host sleeps at steps 22 and 88, CPU-heavy
host work (torch.mm on CPU tensors) at 44 and 110, prefill-only steps at 66 and 132, a 4-chunk chunked prefill
at 154-157, a moderately long request joining at 176 (attention 2.3-2.7x, the step under 2x) and a 131K one at
198 (on the CUDA-core runs the step 3.4-4.6x: split-KV is off at B >= 149).
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_collectors_loop import _step_times

from traceinsight.cli.main import main
from traceinsight.pipeline import analyze

LOOP = Path(__file__).resolve().parents[1] / "examples" / "loop"
RUNS = {
    "loop_fa2_torch": "pt.trace.json.gz",
    "loop_core_torch": "pt.trace.json.gz",
    "loop_core_graph_torch": "pt.trace.json.gz",
    "loop_fa2_nsys": "sqlite",
    "loop_core_graph_nsys": "sqlite",
}
# The cause each injected event must be given when its step is a spike.
CAUSE = {"host-sleep": "host-stall", "host-cpu": "host-stall", "prefill": "prefill", "chunked-prefill": "prefill",
         "long-join": "split-kv-off"}


def _truth(name: str) -> dict[str, dict[str, Any]]:
    with gzip.open(LOOP / f"{name}.sidecar.json.gz") as fh:
        doc = json.load(fh)
    return {s["key"]: s["truth"] for s in doc["steps"]}


@pytest.fixture(scope="module", params=list(RUNS))
def run(request: pytest.FixtureRequest) -> tuple[str, Any, dict[int, str | None]]:
    name = request.param
    _, (a,) = analyze([LOOP / f"{name}.{RUNS[name]}"], meta=[LOOP / f"{name}.sidecar.json.gz"], cache=False)
    truth = _truth(name)
    events: dict[int, str | None] = {}
    for s in a.steps:
        b = a.schedule.batches.get(s.index)
        assert b is not None and b.step_key in truth, s.name  # every step matched its sidecar step
        events[s.index] = (truth[b.step_key] or {}).get("event")
    assert len(a.steps) == 240
    return name, a, events


def _incidents(a: Any) -> list[Any]:
    """The incidents (not the finding that groups the incidents of one cause as their root cause)."""
    return [f for f in a.findings if f.id == "latency-spike" and not f.evidence.get("group")]


def test_every_incident_is_caused_by_the_event_injected_at_its_onset(run: tuple[str, Any, dict]) -> None:
    name, a, events = run
    found = _incidents(a)
    assert found and not any(f.evidence.get("folded") for f in found)
    for f in found:
        e = f.evidence
        first = e["first_step"]
        event = events[first]
        assert event is not None, f"{name}: incident {f.summary} starts at step {first}, where nothing was injected"
        assert e["cause"] == CAUSE[event], (name, f.summary)
        # Onset: the incident starts at the injected event, and the steps before it did not carry the same event.
        assert events.get(first - 1) != event, (name, f.summary)
        assert e["cause"] != "unexplained"


def _measured(name: str) -> tuple[list[str | None], list[float], list[float]]:
    """Each sidecar step's injected event, and its step range's wall and attention-kernel milliseconds, as read by
    examples/loop/step_times.py (stdlib only, the README's table), not by the analysis."""
    st = _step_times()
    trace = LOOP / f"{name}.{RUNS[name]}"
    steps = st.nsys_steps(trace) if trace.suffix == ".sqlite" else st.kineto_steps(trace)
    with gzip.open(LOOP / f"{name}.sidecar.json.gz") as fh:
        keys = [(s["key"], (s["truth"] or {}).get("event")) for s in json.load(fh)["steps"]]
    ranges = [next(x for x in steps if st._matches(k, x.name)) for k, _ in keys]
    return [e for _, e in keys], [x.wall_ms for x in ranges], [x.attn_ms for x in ranges]


def _over_clean_before(events: list[str | None], values: list[float], i: int) -> float:
    """values[i] over the median of the 20 event-free steps before step i (the README's ratios)."""
    before = [values[j] for j in range(i - 1, -1, -1) if events[j] is None][:20]
    return values[i] / statistics.median(before)


def _measured_ratios(name: str) -> dict[int, float]:
    """Each injected event's measured size: its step's wall time over the event-free steps before it."""
    events, walls, _ = _measured(name)
    return {i: _over_clean_before(events, walls, i) for i, e in enumerate(events) if e is not None}


def test_each_injected_event_that_broke_the_trend_is_found(run: tuple[str, Any, dict]) -> None:
    """Judged by measured truth, not by the analysis's own spike ratio: every injected event whose step took
    >= 2x the event-free steps before it (as measured by step_times.py) is in a latency-spike incident with its
    cause; every one of >= 1.3x is found with its cause, as an incident or a slow step (issue 27)."""
    name, a, events = run
    measured = _measured_ratios(name)
    assert sorted(measured) == sorted(i for i, e in events.items() if e is not None)
    incident = {s: f.evidence["cause"] for f in _incidents(a) for s in f.steps}
    slow = {s: f.evidence["cause"] for f in a.findings if f.id == "slow-steps" for s in f.steps}
    for i, ratio in measured.items():
        event = events[i]
        assert event is not None
        if ratio >= 2.0:
            assert incident.get(i) == CAUSE[event], (name, i, event, ratio)
        elif ratio >= 1.3:
            assert CAUSE[event] in (incident.get(i), slow.get(i)), (name, i, event, ratio)
    # Prefill-only steps and the chunked prefill (one incident from its first chunk) are found in every run.
    prefill = [f for f in _incidents(a) if f.evidence["cause"] == "prefill"]
    spans = sorted((f.evidence["first_step"], f.evidence["last_step"]) for f in prefill)
    assert spans == [(66, 66), (132, 132), (154, 157)], (name, spans)


def test_every_injected_host_stall_is_found(run: tuple[str, Any, dict]) -> None:
    """Judged by the sidecar's truth alone: every host event of the scenario is a stall of 1.5x the median warm-up
    step (`truth.ms`, 6.7-10.9 ms against steps of 5-8.5 ms), made to be found: as a latency spike (>= 2x) or a
    slow step short of one (issue 27; before it, loop_fa2_torch's 1.85x sleeps at 22 and 88 went unreported)."""
    name, a, events = run
    truth = _truth(name)
    stalls = {s.index: truth[a.schedule.batches[s.index].step_key] for s in a.steps
              if (events[s.index] or "").startswith("host")}
    assert sorted(stalls) == [22, 44, 88, 110] and all(t["ms"] > 6 for t in stalls.values())
    slow = [f for f in a.findings if f.id == "slow-steps"]
    covered = {s: f.evidence["cause"] for f in [*_incidents(a), *slow] for s in f.steps}
    assert {i: covered.get(i) for i in stalls} == dict.fromkeys(stalls, "host-stall"), name


def test_the_long_request_incident_starts_at_its_onset(run: tuple[str, Any, dict]) -> None:
    """On the CUDA-core runs the moderate join at 176 already makes attention 2.6x while the step stays under
    2x; the 131K join at 198 crosses the threshold: one split-KV-off incident from 176 (onset) to the end."""
    name, a, _ = run
    joins = [f for f in _incidents(a) if f.evidence["cause"] == "split-kv-off"]
    if "core" not in name:
        assert not joins  # FA2 runs: the step stays under 2x (host-bound loop), no spike to explain
        return
    (f,) = joins
    e = f.evidence
    assert (e["first_step"], e["threshold_step"], e["last_step"]) == (176, 198, 239)
    assert e["onset_steps"] == list(range(176, 198))
    assert e["cause_component"] == "attention" and e["attribution"][0]["component"] == "attention"
    assert e["attribution"][0]["share"] > 0.9


def test_no_attention_cause_where_attention_did_not_grow(run: tuple[str, Any, dict]) -> None:
    """Judged by the attention kernels' measured time (step_times.py), not the analysis's attribution: an incident
    blamed on attention is one where attention took >= 2x the event-free steps before it (the long joins: 16-17x
    at worst); a host stall is one where it did not grow (<= 1.2x); anything else is an injected prefill."""
    name, a, events = run
    truth, _, attn = _measured(name)
    for f in _incidents(a):
        grew = max(_over_clean_before(truth, attn, i) for i in f.steps)
        if f.evidence["cause_component"] == "attention":
            assert grew >= 2.0, (name, f.summary, grew)
        elif f.evidence["cause"] == "host-stall":
            assert grew <= 1.2, (name, f.summary, grew)
        else:
            assert f.evidence["cause"] == "prefill" and events[f.evidence["first_step"]] in (
                "prefill", "chunked-prefill"), f.summary


def test_host_stalls_say_what_the_host_did(run: tuple[str, Any, dict]) -> None:
    name, a, events = run
    for f in _incidents(a):
        if f.evidence["cause"] != "host-stall":
            continue
        ev = f.evidence["host_ops"]
        event = events[f.evidence["first_step"]]
        assert ev["stall_ns"] > 5_000_000
        if name.endswith("nsys"):  # -t cuda,nvtx records no host operation besides the step's own range
            assert ev["recorded_ops"] == 0 and "records no host operation" in f.remedy
        elif event == "host-cpu":  # the CPU matrix products, far above their usual time a step
            top = ev["ops"][0]
            assert top["name"] == "aten::mm" and top["in_stall_ns"] > 4 * top["usual_ns"], ev
        else:  # time.sleep: no profiled op covers it
            assert ev["untracked_ns"] > 0.5 * ev["stall_ns"], ev
        if "graph" in name:  # the steps replay CUDA graphs already: the remedy does not offer them
            assert "The step already replays CUDA graphs" in f.remedy and "CUDA graphs cut" not in f.remedy
        else:
            assert "CUDA graphs cut launch overhead but do not hide a stalled host" in f.remedy


def test_chunked_prefill_launches_are_mixed_with_their_tile_padding(run: tuple[str, Any, dict]) -> None:
    _, a, events = run
    for s in a.steps:
        if events[s.index] == "chunked-prefill":
            assert s.phase == "mixed"
            for x in s.launches:
                assert x.phase == "mixed" and x.tiles is not None
                assert x.tiles["decode_rows"] > 0 and x.tiles["prefill_rows"] == 1024 * 8
                assert 0 < x.tiles["padding_share"] < 1
        elif events[s.index] == "prefill":
            assert s.phase == "prefill"
        else:
            assert s.phase == "decode", (s.index, s.phase)


def test_explain_names_the_prefill_of_a_chunked_step() -> None:
    name = "loop_core_torch"
    r = CliRunner().invoke(main, ["explain", str(LOOP / f"{name}.{RUNS[name]}"), "--meta",
                                  str(LOOP / f"{name}.sidecar.json.gz"), "--step", "154", "--format", "json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["phase"] == "mixed" and doc["spike"] and doc["cause"] == "prefill"
    assert doc["incident"]["first_step"] == 154 and doc["tiles"]["decode_rows"] > 0
    grown = {p["component"] for p in doc["attribution"] if p["delta_ns"] > 0}
    assert {"gemm", "prefill", "idle-host"} <= grown
    assert "chunk size" in doc["remedy"]


@pytest.mark.parametrize("name", ["loop_fa2_torch", "loop_fa2_nsys", "loop_core_torch"])
def test_chunked_prefill_is_mixed_from_the_trace_alone(name: str) -> None:
    """Issue 27: without the sidecar (ProfilerStep or NVTX step ranges, kernels only) the chunked-prefill steps
    were prefill (0 of 8 on the FA2 runs). Now each launch's query tiles against the running decode batch
    (the norm kernels' rows in the decode steps around it) name them mixed with the sidecar's shares, and the
    prefill-only steps stay prefill."""
    _, (a,) = analyze([LOOP / f"{name}.{RUNS[name]}"], cache=False)
    truth = {k: (t or {}).get("event") for k, t in _truth(name).items()}  # keys: ProfilerStep#N, id=N
    by_phase: dict[str, list[str | None]] = {}
    for s in a.steps:
        key = next(k for k in truth if s.name == k or s.name.endswith(f" {k}"))
        by_phase.setdefault(s.phase, []).append(truth[key])
    assert by_phase["mixed"] == ["chunked-prefill"] * 4, by_phase.get("mixed")
    assert by_phase["prefill"] == ["prefill"] * 2
    assert "chunked-prefill" not in by_phase["decode"] and "prefill" not in by_phase["decode"]
    batch = 50 if "fa2" in name else 162  # the decode requests riding with the 1024-row chunk
    for s in a.steps:
        for x in s.launches if s.phase == "mixed" else ():
            assert x.phase == "mixed" and "query tiles against the request count" in x.phase_evidence
            assert x.tiles is not None and x.tiles["prefill_rows"] == 1024 * 8 and x.tiles["decode_rows"] == batch * 8
