"""The Gantt of a report: the simulated CTA -> SM schedule of one attention launch, taken from the schedule
model the analysis attached (`analysis.schedule.models[kernel_id].sim`, see `traceinsight.model.attach`).
`gantt_for` picks the worst launch (`launch_pick.worst_launch`, falling back to the modelled launch with the
longest tail); `gantt_for_launch` draws any launch. Each returns a `Gantt` (data, defined here;
`figures.gantt_figure` draws it), or the sentence saying why none can be drawn."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import orjson

from traceinsight.report import launch_pick
from traceinsight.units import fmt_ns

if TYPE_CHECKING:
    from traceinsight.diagnose.context import TraceAnalysis
    from traceinsight.model.planners.types import WorkItem

# The Gantt as data is made here, without matplotlib (~0.5 s to import): the analysis tables keep every trace's
# (`stored_gantt`); `figures.gantt_figure` draws it.

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
    return gantt_from_sim(sim, num_sms, slots, title, measured_ns=k.dur_ns)


def gantt_for(analysis: TraceAnalysis, doc: dict[str, Any]) -> Gantt | str:
    """Gantt of the worst launch of `analysis`; when that launch was not simulated, of the simulated launch
    with the longest tail; else why there is none."""
    ref = launch_pick.worst_launch(doc)
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
    if isinstance(g, Gantt):
        g.notes.insert(0, "Shown: the simulated launch with the longest tail (the worst launch itself was not "
                          "simulated).")
    return g


def stored_gantt(analysis: TraceAnalysis) -> str | None:
    """The report's Gantt as the `analyses` table keeps it (JSON of `gantt_for`'s result), when the schedule model
    simulated a launch; None otherwise (`gantt_from_doc` then says why from the document alone)."""
    from traceinsight.model.shared_objects import distinct

    sched = getattr(analysis, "schedule", None)
    if sched is None or not any(getattr(m, "sim", None) is not None  # each shared model once
                                for m in distinct(list(sched.models.values()))[0]):
        return None
    g = gantt_for(analysis, _worst_launch_doc(analysis))
    if isinstance(g, str):
        return orjson.dumps(g).decode()
    # As `dataclasses.asdict` writes it, each segment as the list of its fields (asdict's deep copy: 5x the time).
    names = [f.name for f in fields(Segment)]
    body = {f.name: [[getattr(x, n) for n in names] for x in g.segments] if f.name == "segments"
            else getattr(g, f.name) for f in fields(g)}
    return orjson.dumps(body).decode()


def _worst_launch_doc(analysis: TraceAnalysis) -> dict[str, Any]:
    """What `launch_pick.worst_launch` reads of the document (`saved.document`): every step's index and its
    launches' dur_ns and model, and the findings; not the whole document of every step, launch and batch."""
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
        body = orjson.loads(stored)
        if isinstance(body, str):
            return body
        fields = {k: v for k, v in body.items() if k != "segments"}
        return Gantt(**fields, segments=[Segment(*seg) for seg in body["segments"]])
    ref = launch_pick.worst_launch(doc)
    if ref is None:
        return "not available: no attention launch in the trace"
    _, launch = launch_pick.launch_at(doc, ref)
    return _needs((launch.get("model") or {}).get("note"))


def _needs(note: str | None) -> str:
    """Why a launch cannot be drawn: NEEDS, with the model's note on it when there is one."""
    return NEEDS + (f" ({note})" if note else "")


@dataclass(frozen=True)
class Segment:
    """One work item (CTA) on one SM: [start_ns, end_ns) from the launch start; `slot` is its resident slot on
    the SM (0-based) when known; `tail` marks the work items that form the tail."""

    sm: int
    start_ns: float
    end_ns: float
    tail: bool = False
    slot: int | None = None
    label: str = ""


@dataclass
class Gantt:
    """A simulated launch, ready to draw."""

    title: str
    num_sms: int
    slots_per_sm: int
    segments: list[Segment] = field(default_factory=list)
    predicted_ns: float | None = None
    measured_ns: float | None = None
    tail_start_ns: float | None = None
    sm_idle: float | None = None
    notes: list[str] = field(default_factory=list)


def gantt_from_sim(sim: object, num_sms: int, slots_per_sm: int, title: str,
                      measured_ns: float | None = None) -> Gantt:
    """A Gantt from a `traceinsight.model.simulate.SimResult` (read by attribute: segments with sm, slot,
    start_ns, end_ns, item; tail_items; tail_intervals; sm_busy_ns; sm_idle_fraction; predicted_ns), with notes
    saying which SMs idle and which work items form the tail."""
    tail_ids = {id(it) for it in getattr(sim, "tail_items", ())}
    intervals = list(getattr(sim, "tail_intervals", ()) or [])
    segs = []
    for s in getattr(sim, "segments", ()):
        in_tail = id(s.item) in tail_ids and any(s.end_ns > a and s.start_ns < b for a, b in intervals)
        it = s.item
        label = (f"request {it.request}, chunk {it.chunk_index}, KV [{it.kv_start:,}, {it.kv_start + it.kv_tokens:,})"
                 + (f", KV head {it.kv_head}" if it.kv_head is not None else ""))
        segs.append(Segment(s.sm, s.start_ns, s.end_ns, in_tail, s.slot // num_sms if slots_per_sm > 1 else None,
                            label))
    predicted = getattr(sim, "predicted_ns", None)
    idle = getattr(sim, "sm_idle_fraction", None)
    sched = Gantt(title=title, num_sms=num_sms, slots_per_sm=slots_per_sm, segments=segs, predicted_ns=predicted,
                     measured_ns=measured_ns, tail_start_ns=intervals[0][0] if intervals else None, sm_idle=idle)
    sched.notes.extend(tail_notes(sim, num_sms, measured_ns))
    return sched


def tail_notes(sim: object, num_sms: int, measured_ns: float | None = None) -> list[str]:
    """Plain sentences on a simulated launch: predicted vs measured time, SM idle, the tail and its work items."""
    notes = []
    predicted = getattr(sim, "predicted_ns", None)
    if predicted is not None:
        meas = f" (measured {fmt_ns(measured_ns)}, {predicted / measured_ns - 1:+.0%})" if measured_ns else ""
        notes.append(f"Predicted {fmt_ns(predicted)}{meas}; the SMs sit idle "
                     f"{getattr(sim, 'sm_idle_fraction', 0.0):.0%} of the time.")
    tail_ns = getattr(sim, "tail_ns", 0.0) or 0.0
    items = list(getattr(sim, "tail_items", ()))
    if tail_ns > 0 and items:
        tail_set = set(items)
        busy_sms = {s.sm for s in getattr(sim, "segments", ()) if s.item in tail_set}
        by_req: dict[int, list[WorkItem]] = {}
        for it in items:
            by_req.setdefault(it.request, []).append(it)
        reqs = sorted(by_req.items(), key=lambda kv: -sum(i.kv_tokens for i in kv[1]))
        desc = "; ".join(f"request {r}: {len(its)} item{'s' if len(its) > 1 else ''} of "
                         f"{max(i.kv_tokens for i in its):,} KV tokens" for r, its in reqs[:4])
        more = f"; +{len(reqs) - 4} more requests" if len(reqs) > 4 else ""
        notes.append(f"Tail: {fmt_ns(tail_ns)} with fewer than half the SMs busy; {len(items)} work items on "
                     f"{len(busy_sms)} SMs form it ({desc}{more}); the other {num_sms - len(busy_sms)} SMs are idle "
                     "by then.")
    else:
        notes.append("No tail: at least half the SMs stay busy until the end.")
    return notes
