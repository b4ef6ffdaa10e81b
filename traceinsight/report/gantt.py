"""The Gantt of a report: the simulated CTA -> SM schedule of one attention launch, taken from the schedule
model the analysis attached (`analysis.schedule.models[kernel_id].sim`, see `traceinsight.model.attach`).
`gantt_for` picks the worst launch (`sections.worst_launch`, falling back to the modelled launch with the
longest tail); `gantt_for_launch` draws any launch. Each returns a `figures.Gantt`, or the sentence saying why
none can be drawn."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import orjson

from traceinsight.report import sections

if TYPE_CHECKING:
    from traceinsight.diagnose.context import TraceAnalysis
    from traceinsight.report.figures import Gantt

# `figures` (and with it matplotlib, ~0.5 s to import) is imported where a Gantt is made, not here: the analysis
# tables ask `stored_gantt` of every trace, and most have no simulated launch to draw.

NEEDS = ("not available: needs the schedule model with the launch's batch composition (a sidecar with every "
         "request's KV length, via --meta) and a cost model calibrated on balanced launches of the trace")
PERSISTENT = frozenset({"flashinfer-sm90", "fa3"})


def _model(analysis: TraceAnalysis, kernel_id: int) -> Any:
    sched = getattr(analysis, "schedule", None)
    return None if sched is None else sched.models.get(kernel_id)


def _launch(analysis: TraceAnalysis, step: int, launch: int) -> Any:
    for s in analysis.steps:
        if s.index == step:
            return s, s.launches[launch] if launch < len(s.launches) else None
    return None, None


def gantt_for_launch(analysis: TraceAnalysis, step: int, launch: int = 0) -> Gantt | str:
    """The Gantt of launch `launch` of step `step` (indexes as in the JSON document), or why there is none."""
    s, x = _launch(analysis, step, launch)
    if x is None:
        return f"not available: step {step} has no attention launch {launch}"
    model = _model(analysis, x.attention.kernel_id)
    sim = getattr(model, "sim", None)
    if sim is None:
        return _needs(getattr(model, "note", None))
    sched = analysis.schedule
    assert sched is not None and sched.gpu is not None  # a simulated model comes from a schedule with its GPU
    k = x.attention
    num_sms = sched.gpu.num_sms
    if k.backend in PERSISTENT:
        slots = max(1, -(-max(k.grid[0], 1) // num_sms))
    else:
        slots = sched.occupancy_for(k) or 1
    split = {True: "split-KV on", False: "split-KV off"}.get(model.split_kv, "split-KV ?")
    grid = "(" + ",".join(str(v) for v in k.grid) + ")"
    title = f"Step {s.index}: {s.name}\n{k.kernel} grid {grid} · {split} · {model.work_items} work items"
    from traceinsight.report.figures import gantt_from_sim

    return gantt_from_sim(sim, num_sms, slots, title, measured_ns=k.dur_ns)


def gantt_for(analysis: TraceAnalysis, doc: dict[str, Any]) -> Gantt | str:
    """Gantt of the worst launch of `analysis`; when that launch was not simulated, of the simulated launch
    with the longest tail; else why there is none."""
    ref = sections.worst_launch(doc)
    if ref is None:
        return "not available: no attention launch in the trace"
    first = gantt_for_launch(analysis, ref.step, ref.launch)
    if not isinstance(first, str):
        first.notes.insert(0, f"Shown: {ref.reason}.")
        return first
    best: tuple[float, int, int, int] | None = None
    for s in analysis.steps:
        for j, x in enumerate(s.launches):
            m = _model(analysis, x.attention.kernel_id)
            if getattr(m, "sim", None) is not None:
                key = (m.tail_ns or 0, x.attention.dur_ns)
                if best is None or key > best[:2]:
                    best = (key[0], key[1], s.index, j)
    if best is None:
        return first
    g = gantt_for_launch(analysis, best[2], best[3])
    if not isinstance(g, str):
        g.notes.insert(0, "Shown: the simulated launch with the longest tail (the worst launch itself was not "
                          "simulated).")
    return g


def stored_gantt(analysis: TraceAnalysis) -> str | None:
    """The report's Gantt as the `analyses` table keeps it (JSON of `gantt_for`'s result), when the schedule model
    simulated a launch; None otherwise (`gantt_from_doc` then says why from the document alone)."""
    sched = getattr(analysis, "schedule", None)
    if sched is None or not any(getattr(m, "sim", None) is not None for m in sched.models.values()):
        return None
    g = gantt_for(analysis, _worst_launch_doc(analysis))
    body: Any = g if isinstance(g, str) else {**asdict(g), "segments": [list(asdict(x).values()) for x in g.segments]}
    return orjson.dumps(body).decode()


def _worst_launch_doc(analysis: TraceAnalysis) -> dict[str, Any]:
    """What `sections.worst_launch` reads of the document (`json_doc.to_json`): every step's index and its launches'
    dur_ns and model, and the findings; not the whole document of every step, launch and batch."""
    models = analysis.schedule.models if analysis.schedule is not None else {}

    def launch(x: Any) -> dict[str, Any]:
        model = models.get(x.attention.kernel_id)
        return {"dur_ns": x.attention.dur_ns} if model is None else {"dur_ns": x.attention.dur_ns,
                                                                        "model": model.to_json()}

    return {"steps": [{"index": s.index, "launches": [launch(x) for x in s.launches]} for s in analysis.steps],
            "findings": [f.to_json() if hasattr(f, "to_json") else f for f in analysis.findings]}  # as json_doc


def gantt_from_doc(doc: dict[str, Any], stored: str | None) -> Gantt | str:
    """The report's Gantt of a document rebuilt from the tables: the stored one (`stored_gantt`), else why there
    is none, as `gantt_for` says it when no launch was simulated."""
    if stored is not None:
        from traceinsight.report.figures import Gantt, Segment

        body = orjson.loads(stored)
        if isinstance(body, str):
            return body
        fields = {k: v for k, v in body.items() if k != "segments"}
        return Gantt(**fields, segments=[Segment(*seg) for seg in body["segments"]])
    ref = sections.worst_launch(doc)
    if ref is None:
        return "not available: no attention launch in the trace"
    _, launch = sections.launch_at(doc, ref)
    return _needs((launch.get("model") or {}).get("note"))


def _needs(note: str | None) -> str:
    """Why a launch cannot be drawn: NEEDS, with the model's note on it when there is one."""
    return NEEDS + (f" ({note})" if note else "")
