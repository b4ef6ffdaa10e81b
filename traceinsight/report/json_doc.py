"""The JSON document of an analysis: schema `traceinsight.analysis/1` (docs/JSON.md). Keys are stable once
released: add keys, never rename or remove them.

One builder makes every document (report/saved.py): it reads the analysis tables (report/tables.py), whether
`analyze` wrote them a moment ago or a saved analysis holds them. This module holds what the writer of the tables
and that reader share: the schema's names, the trace-level sections the `analyses` table keeps
(`trace_sections`, built from the analysis when its tables are written), the rule that picks the steps that
matter (`pick_steps`) and the streamed JSON writer (`write_streamed`)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Container, Iterable, Mapping
from typing import IO, TYPE_CHECKING, Any

import orjson

from traceinsight import __version__
from traceinsight.report.fleet import summary_row

if TYPE_CHECKING:  # annotations only: a document rebuilt from saved tables (report/saved.py) needs no model
    from traceinsight.diagnose.context import TraceAnalysis
    from traceinsight.model.schedule import Schedule
    from traceinsight.model.steps import Step

SCHEMA = "traceinsight.analysis/1"
MULTI_SCHEMA = "traceinsight.analyses/1"

# Which steps a document holds: every one, or the steps that matter (`selected_steps`).
STEPS_ALL = "all"
STEPS_SELECTED = "selected"
# The steps that matter: per finding, its first and its slowest steps and those its evidence names; overall, the
# slowest steps.
STEPS_PER_FINDING = 5
SLOWEST_STEPS = 10
EVIDENCE_STEPS = ("first_step", "last_step", "threshold_step", "worst_step", "step")

# One step as `step_summary` reads it: (dur_ns, attention_ns, [(kernel, backend, split_kv) per launch]).
StepFacts = tuple[int, int, list[tuple[str, str | None, bool | None]]]


def _facts(s: Step) -> StepFacts:
    return s.dur_ns, s.attention_ns, [(x.attention.kernel, x.attention.backend, x.split_kv) for x in s.launches]


def step_summary(steps: Iterable[StepFacts]) -> dict[str, Any]:
    """What every step adds up to, so that a document holding only some steps still says it: count, GPU span
    total/median/max (ns), attention time (ns), and split-KV launch counts, overall and per (kernel, backend)."""
    durs: list[int] = []
    attention = 0
    split = {"on": 0, "off": 0, "unknown": 0}
    per: dict[tuple[str, str | None], dict[str, int]] = {}
    for dur, att, launches in steps:
        durs.append(dur)
        attention += att
        for kernel, backend, kv in launches:
            state = "on" if kv is True else "off" if kv is False else "unknown"
            split[state] += 1
            per.setdefault((kernel, backend), {"on": 0, "off": 0, "unknown": 0})[state] += 1
    durs.sort()
    return {
        "count": len(durs),
        "total_ns": sum(durs),
        "attention_ns": attention,
        "median_ns": int(statistics.median(durs)) if durs else None,
        "max_ns": durs[-1] if durs else None,
        "split_kv": split,
        "split_kv_by_kernel": [{"kernel": k, "backend": b, **v} for (k, b), v in per.items()],
    }


def pick_steps(slowest: Iterable[int], findings: Iterable[tuple[Iterable[int], Mapping[str, Any] | None]],
               wall: Callable[[int], int], known: Container[int]) -> list[int]:
    """The steps that matter, as indexes in step order: the `slowest` steps (the SLOWEST_STEPS of longest wall
    time), and per finding (its steps, its evidence) its first STEPS_PER_FINDING steps, its STEPS_PER_FINDING
    slowest by `wall(step)` and the steps its evidence names, among the `known` steps (`report.saved` applies it
    to the tables)."""
    keep = set(slowest)
    for steps, evidence in findings:
        named = [i for i in steps if i in known]
        keep.update(named[:STEPS_PER_FINDING])
        keep.update(sorted(named, key=lambda i: -wall(i))[:STEPS_PER_FINDING])
        ev = evidence or {}
        keep.update(ev[k] for k in EVIDENCE_STEPS if isinstance(ev.get(k), int) and ev[k] in known)
    return sorted(keep)


def trace_sections(a: TraceAnalysis) -> dict[str, Any]:
    """The trace-level sections of `a`'s document (what the `analyses` table keeps; the steps, findings and checks
    have their own tables): schema, tool, trace, families, kernels, thresholds, summary, step_summary, savings,
    model and the batch-size sweep's panels (`model.sweep`); the analysis's extra sections are kept as they are
    (`extra_json`)."""
    from traceinsight.model.sweep import sweep_panels

    gpu = a.gpu
    sched = a.schedule
    thresholds = [t.to_json() for t in sched.thresholds.values()] if sched is not None else []
    return {
        "schema": SCHEMA,
        "tool": {"name": "traceinsight", "version": __version__},
        "trace": {
            "path": a.path,
            "format": a.format,
            "format_version": a.format_version,
            "tool_version": a.tool_version,
            "gpu": {
                "name": gpu.get("name"),
                "num_sms": gpu.get("num_sms"),
                "device_id": gpu.get("device_id"),
                "compute_capability": (
                    f"{gpu['compute_major']}.{gpu['compute_minor']}" if gpu.get("compute_major") is not None else None
                ),
            },
            "start_ns": a.start_ns,
            "end_ns": a.end_ns,
            "dur_ns": a.dur_ns,
            "warnings": a.warnings,
        },
        "families": a.families,
        "kernels": kernel_rows(a),
        "thresholds": thresholds,
        "summary": summary_row(a),
        "step_summary": step_summary(_facts(s) for s in a.steps),
        "savings": savings_summary(a),
        "model": _schedule(sched),
        "sweep": [p.to_json() for p in sweep_panels(
            ((s.name, s.attention_ns, [(x.attention.kernel, x.attention.backend, x.split_kv) for x in s.launches])
             for s in a.steps), thresholds)],
    }


def kernel_rows(a: TraceAnalysis) -> list[dict[str, Any]]:
    """The kernel table with each attention, merge and prepare kernel's phase taken from its launches (the phase
    the steps and findings use): one phase when every launch has it, `mixed` when they differ. The phase the
    name alone gives stays as `name_phase`. Kernels no step launches keep the name's phase."""
    phases: dict[str, set[str]] = {}
    for s in a.steps:
        for x in s.launches:
            for kern in (x.attention, *x.merges, *x.prepares):
                phases.setdefault(kern.name, set()).add(x.phase or "unknown")
    rows = []
    for k in a.kernels:
        seen = {p for p in phases.get(k.get("name", ""), set()) if p != "unknown"}
        if not seen:
            rows.append(k)
            continue
        phase = seen.pop() if len(seen) == 1 else "mixed"
        row = {**k, "name_phase": k.get("phase"), "phase": phase}
        if phase != k.get("phase"):
            n = sum(1 for s in a.steps for x in s.launches for y in (x.attention, *x.merges, *x.prepares)
                    if y.name == k.get("name"))
            row["phase_evidence"] = (f"from its {n} launches in steps" + (", in which prefill and decode both ran"
                                                                         if phase == "mixed" else "")
                                     + f" (the name alone: {k.get('phase')}"
                                     + (f", {k['phase_evidence']}" if k.get("phase_evidence") else "") + ")")
        rows.append(row)
    return rows


def savings_summary(a: TraceAnalysis) -> dict[str, Any]:
    """What the listed savings are bounded by and add up to, over every step (ns): steps_wall_ns (the steps' wall
    time), steps_floor_ns (what the steps would still take with the remedies: each step's time under the remedy
    that saves it the most, `traceinsight.diagnose.rootcause.floors`), between_steps_ns (the time between steps'
    windows, from the first step to the last), and the root causes' attributed savings on each basis
    (listed_steps_ns <= steps_wall_ns - steps_floor_ns, listed_between_ns <= between_steps_ns)."""
    from traceinsight.diagnose.rootcause import BASIS_SPAN, BASIS_STEPS, budgets, step_floors

    b = budgets(a.steps)
    listed = {BASIS_STEPS: 0, BASIS_SPAN: 0}
    for f in a.findings:
        if getattr(f, "supports", None) is None and getattr(f, "attributed_ns", None):
            basis = f.saving_basis if f.saving_basis in listed else BASIS_STEPS
            listed[basis] += int(f.attributed_ns)
    return {"steps_wall_ns": sum(b[BASIS_STEPS].values()),
            "steps_floor_ns": sum(step_floors(a.findings, a.steps).values()),
            "between_steps_ns": sum(b[BASIS_SPAN].values()),
            "listed_steps_ns": listed[BASIS_STEPS], "listed_between_ns": listed[BASIS_SPAN],
            "basis": "each root cause's saving is bounded, step by step, by the step's wall time minus its floor "
                     "(what the step would still take under the remedy that saves it the most: the balanced "
                     "split-on launch, the other path, the baseline step) for savings inside steps, or by the time "
                     "before the step since the previous one ended (gpu-idle-gaps)"}


def _schedule(sched: Schedule | None) -> dict[str, Any] | None:
    """Facts about the schedule model as a whole: the GPU model, calibrated costs, notes."""
    if sched is None:
        return None
    gpu = sched.gpu
    return {
        "gpu": None if gpu is None else {
            "key": gpu.key, "name": gpu.name, "num_sms": gpu.num_sms,
            "hbm_bandwidth_bytes_per_s": gpu.hbm_bandwidth_bytes_per_s,
        },
        "cost_models": [
            {"name": name, "kernel": sched.thresholds[name].kernel if name in sched.thresholds else None,
             "cta_rate_tokens_per_ns": c.cta_rate, "sm_rate_tokens_per_ns": c.sm_rate,
             "gpu_rate_tokens_per_ns": c.gpu_rate, "item_overhead_tokens": c.item_overhead_tokens,
             "launch_ns": c.launch_ns, "sharpness": None if c.sharpness == float("inf") else c.sharpness}
            for name, c in sched.costs.items()
        ],
        "idle_gaps": len(sched.idle_gaps),
        "idle_gap_ns": int(sched.idle_gaps.dur_ns.sum()),
        "notes": list(sched.notes),
    }


JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
STEPS_HOLE = "\x00steps\x00"  # stands for the steps list in the serialized document until it is streamed in


def write_streamed(whole: dict[str, Any], steps: list[Iterable[dict[str, Any]]], out: IO[bytes]) -> None:
    """Write the document `whole`, whose traces' `steps` are STEPS_HOLE, with the steps of each trace in turn
    streamed into their place, one step per line."""
    text = orjson.dumps(whole, option=JSON_OPTIONS) + b"\n"
    hole = orjson.dumps(STEPS_HOLE)
    pieces = text.split(hole)
    if len(pieces) != len(steps) + 1:
        raise RuntimeError("the steps marker must appear once per trace")  # pragma: no cover - a bug here
    for trace_steps, before in zip(steps, pieces, strict=False):
        out.write(before)
        out.write(b"[")
        empty = True
        for i, step in enumerate(trace_steps):
            out.write(b"\n" if i == 0 else b",\n")
            out.write(orjson.dumps(step, option=orjson.OPT_NON_STR_KEYS))
            empty = False
        out.write(b"]" if empty else b"\n]")
    out.write(pieces[-1])
