"""The JSON document of an analysis: schema `traceinsight.analysis/1` (docs/JSON.md). Keys are stable once
released: add keys, never rename or remove them.

One builder makes every document (report/saved.py): it reads the analysis tables (report/tables.py), whether
`analyze` wrote them a moment ago or a saved analysis holds them. This module holds what the writer of the tables
and that reader share: the schema's names, the trace-level sections the `analyses` table keeps
(`trace_sections`, built from the analysis when its tables are written), the rule that picks the steps that
matter (`pick_steps`) and the streamed JSON writer (`write_streamed`)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

import orjson

from traceinsight import __version__
from traceinsight.report.fleet import summary_row

if TYPE_CHECKING:  # annotations only: a document rebuilt from saved tables (report/saved.py) needs no model
    import numpy as np

    from traceinsight.diagnose.context import TraceAnalysis
    from traceinsight.model.schedule import Schedule
    from traceinsight.model.shared_objects import Coded
    from traceinsight.report.step_columns import StepColumns

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


def step_summary(steps: Iterable[StepFacts]) -> dict[str, Any]:
    """What every step adds up to, so that a document holding only some steps still says it: count, GPU span
    total/median/max (ns), attention time (ns), and split-KV launch counts, overall and per (kernel, backend)."""
    durs: list[int] = []
    attention = 0
    launches: list[tuple[str, str | None, bool | None]] = []
    for dur, att, step_launches in steps:
        durs.append(dur)
        attention += att
        launches.extend(step_launches)
    return step_summary_of(durs, attention, launches)


# A launch as the step summary counts it: (kernel, backend, split_kv).
LaunchKey = tuple[str, str | None, bool | None]


def step_summary_of(durs: Sequence[int] | np.ndarray, attention: int,
                    launches: Iterable[LaunchKey] | Mapping[LaunchKey, int]) -> dict[str, Any]:
    """`step_summary` of the steps' GPU spans, their attention time added up, and every launch's (kernel, backend,
    split_kv) in step order (tuples, or columns zipped), or how many launches have each, in first-seen order."""
    split = {"on": 0, "off": 0, "unknown": 0}
    per: dict[tuple[str, str | None], dict[str, int]] = {}
    for (kernel, backend, kv), count in Counter(launches).items():  # in first-seen order
        state = "on" if kv is True else "off" if kv is False else "unknown"
        split[state] += count
        per.setdefault((kernel, backend), {"on": 0, "off": 0, "unknown": 0})[state] += count
    import numpy as np

    ordered = np.sort(np.asarray(durs, np.int64))  # 10^6 steps: not as Python ints
    k = len(ordered)
    middle = [int(v) for v in ordered[(k - 1) // 2:k // 2 + 1]]  # the one or two values the median takes
    return {
        "count": k,
        "total_ns": int(ordered.sum()),
        "attention_ns": int(attention),
        "median_ns": int(statistics.median(middle)) if k else None,
        "max_ns": int(ordered[-1]) if k else None,
        "split_kv": split,
        "split_kv_by_kernel": [{"kernel": k, "backend": b, **v} for (k, b), v in per.items()],
    }


def pick_steps(slowest: Iterable[int], per_finding: Iterable[int], evidence: Iterable[Mapping[str, Any] | None],
               known: Callable[[list[int]], Container[int]]) -> list[int]:
    """The steps that matter, as indexes in step order: the `slowest` steps (the SLOWEST_STEPS of longest wall
    time), per finding its first STEPS_PER_FINDING steps and its STEPS_PER_FINDING slowest by wall time among the
    steps that are (`per_finding`: queries/finding_steps.sql picks them from the tables), and the steps each
    finding's `evidence` names, those of them that are (`known(steps)`; `report.saved` applies it to the
    tables)."""
    keep = set(slowest) | set(per_finding)
    named = [ev[k] for ev in evidence if ev for k in EVIDENCE_STEPS if isinstance(ev.get(k), int)]
    if named:
        found = known(named)
        keep.update(i for i in named if i in found)
    return sorted(keep)


def trace_sections(a: TraceAnalysis, columns: StepColumns | None = None) -> dict[str, Any]:
    """The trace-level sections of `a`'s document (what the `analyses` table keeps; the steps, findings and checks
    have their own tables): schema, tool, trace, families, kernels, thresholds, summary, step_summary, savings,
    model and the batch-size sweep's panels (`model.sweep`); the analysis's extra sections are kept as they are
    (`extra_json`). `columns`: `a`'s steps as columns, when the caller has them (`report.step_columns`)."""
    from traceinsight.model.shared_objects import counts
    from traceinsight.report.step_columns import SPLIT_STATES, step_columns
    from traceinsight.report.sweep_columns import sweep_panels_of

    c = step_columns(a.steps) if columns is None else columns
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
        "kernels": kernel_rows(a, c),
        "thresholds": thresholds,
        "summary": summary_row(a, c.dur, Counter(map(SPLIT_STATES.__getitem__, c.split.tolist()))),
        "step_summary": step_summary_of(c.dur, int(c.attention.sum()), counts(c.k_kernel, c.k_backend, c.l_split_kv)),
        "savings": savings_summary(a, c),
        "model": _schedule(sched),
        "sweep": [p.to_json() for p in sweep_panels_of(c, thresholds)],
    }


def _attached_uses(groups: Coded, phases: Coded) -> Iterable[tuple[str, str]]:
    """(kernel name, its launch's phase) of each merge or prepare kernel of these groups (one group per launch),
    in order: the names read once per kernel view shape (`model.kernel_columns.Kernel._shape`)."""
    from itertools import chain
    from operator import attrgetter

    import numpy as np

    from traceinsight.model.shared_objects import first_rows

    lengths = np.fromiter(map(len, groups.values), np.int64, len(groups.values))[groups.codes]
    if not lengths.any():
        return ()
    kernels = list(chain.from_iterable(groups))
    rows, shape_of = first_rows(list(map(attrgetter("_shape"), kernels)))
    names = np.array([kernels[r].name for r in rows.tolist()], object)[shape_of].tolist()
    return zip(names, phases.at(np.repeat(np.arange(len(lengths)), lengths)), strict=True)


def kernel_rows(a: TraceAnalysis, columns: StepColumns | None = None) -> list[dict[str, Any]]:
    """The kernel table with each attention, merge and prepare kernel's phase taken from its launches (the phase
    the steps and findings use): one phase when every launch has it, `mixed` when they differ. The phase the
    name alone gives stays as `name_phase`. Kernels no step launches keep the name's phase. `columns`: `a`'s
    steps as columns (`report.step_columns`)."""
    from traceinsight.model import shared_objects
    from traceinsight.report.step_columns import step_columns

    c = step_columns(a.steps) if columns is None else columns
    # (kernel name, its launch's phase) of every attention, merge and prepare kernel, counted
    uses = Counter(shared_objects.counts(c.k_name, c.l_phase))
    for groups in (c.merges, c.prepares):
        uses.update(_attached_uses(groups, c.l_phase))
    phases: dict[str, set[str]] = {}
    launched: Counter[str] = Counter()
    for (name, phase), n in uses.items():
        phases.setdefault(name, set()).add(phase or "unknown")
        launched[name] += n
    rows = []
    for k in a.kernels:
        seen = {p for p in phases.get(k.get("name", ""), set()) if p != "unknown"}
        if not seen:
            rows.append(k)
            continue
        phase = seen.pop() if len(seen) == 1 else "mixed"
        row = {**k, "name_phase": k.get("phase"), "phase": phase}
        if phase != k.get("phase"):
            n = launched[k.get("name", "")]
            row["phase_evidence"] = (f"from its {n} launches in steps" + (", in which prefill and decode both ran"
                                                                         if phase == "mixed" else "")
                                     + f" (the name alone: {k.get('phase')}"
                                     + (f", {k['phase_evidence']}" if k.get("phase_evidence") else "") + ")")
        rows.append(row)
    return rows


def savings_summary(a: TraceAnalysis, columns: StepColumns | None = None) -> dict[str, Any]:
    """What the listed savings are bounded by and add up to, over every step (ns): steps_wall_ns (the steps' wall
    time), steps_floor_ns (what the steps would still take with the remedies: each step's time under the remedy
    that saves it the most, `traceinsight.diagnose.rootcause.floors`), between_steps_ns (the time between steps'
    windows, from the first step to the last: `rootcause.budgets`' BASIS_SPAN, added up from the steps' windows
    as columns), and the root causes' attributed savings on each basis (listed_steps_ns <= steps_wall_ns -
    steps_floor_ns, listed_between_ns <= between_steps_ns). `columns`: `a`'s steps as columns."""
    from traceinsight.diagnose.rootcause import BASIS_SPAN, BASIS_STEPS
    from traceinsight.report.step_columns import step_columns

    c = step_columns(a.steps) if columns is None else columns
    listed = {BASIS_STEPS: 0, BASIS_SPAN: 0}
    for f in a.findings:
        if getattr(f, "supports", None) is None and getattr(f, "attributed_ns", None):
            basis = f.saving_basis if f.saving_basis in listed else BASIS_STEPS
            listed[basis] += int(f.attributed_ns)
    walls = _Walls(c)
    return {"steps_wall_ns": int(walls.wall.sum()),
            "steps_floor_ns": _floor_total(a.findings, walls),
            "between_steps_ns": _between_steps(c),
            "listed_steps_ns": listed[BASIS_STEPS], "listed_between_ns": listed[BASIS_SPAN],
            "basis": "each root cause's saving is bounded, step by step, by the step's wall time minus its floor "
                     "(what the step would still take under the remedy that saves it the most: the balanced "
                     "split-on launch, the other path, the baseline step) for savings inside steps, or by the time "
                     "before the step since the previous one ended (gpu-idle-gaps)"}


class _Walls:
    """The steps' wall times by step index (`rootcause.budgets`' BASIS_STEPS: one per index, the last step of an
    index when several share it), as an array and where each index is in it."""

    def __init__(self, c: StepColumns) -> None:
        import numpy as np

        self.numbered = bool((c.index == np.arange(c.n)).all())  # step i at position i: as the pipeline numbers
        self.at: dict[int, int] = {} if self.numbered else dict(zip(c.index.tolist(), range(c.n), strict=True))
        if self.numbered:
            self.wall = c.wall
        else:
            keep = np.fromiter(self.at.values(), np.int64, len(self.at))
            self.wall = np.zeros(c.n, np.int64)
            self.wall[keep] = c.wall[keep]  # a position another step of its index overrides holds 0

    def positions(self, steps: Iterable[int]) -> np.ndarray:
        """Where each of these step indexes is (-1: no step has it)."""
        import numpy as np

        if self.numbered:
            got = np.fromiter(steps, np.int64)
            return np.where((got >= 0) & (got < len(self.wall)), got, -1)
        return np.fromiter((self.at.get(s, -1) for s in steps), np.int64)


def _floor_total(findings: list[Any], walls: _Walls) -> int:
    """The steps' floors added up: `rootcause.step_floors` (each step's wall time less the most any root cause
    whose saving lies inside steps claims in it, `rootcause.step_claims`), on the walls as an array."""
    import numpy as np

    from traceinsight.diagnose.rootcause import BASIS_STEPS, _claim, saving_basis

    wall = walls.wall
    best = np.zeros(len(wall), np.int64)
    refs = {f.ref: j for j, f in enumerate(findings)}
    roots = [refs.get(f.supports, j) if f.supports is not None else j for j, f in enumerate(findings)]
    for j, f in enumerate(findings):
        if roots[j] != j or saving_basis(f.id) != BASIS_STEPS:
            continue
        saving, per_step = _claim(j, findings, roots)
        if saving is None:
            continue
        if per_step:  # where the rule placed its saving, at most each step's wall time
            at = walls.positions(per_step)
            claimed = np.maximum(np.fromiter(map(int, per_step.values()), np.int64, len(per_step)), 0)[at >= 0]
            at = at[at >= 0]
            claimed = np.minimum(claimed, wall[at])
        else:  # spread over its steps in proportion to their wall time
            at = walls.positions(dict.fromkeys(f.steps))
            at = at[at >= 0]
            total = int(wall[at].sum())
            if not total:
                continue
            claimed = (wall[at] * min(1.0, max(0, int(saving)) / total)).astype(np.int64)
        np.maximum.at(best, at, claimed)
    return int((wall - np.minimum(wall, best)).sum())


def _between_steps(c: StepColumns) -> int:
    """The time between the steps' windows added up (`rootcause.budgets`' BASIS_SPAN): before each window (in
    start order) since the latest end of the windows before it, 0 for a pause of PAUSE_MIN_NS or more."""
    import numpy as np

    from traceinsight.diagnose.rules.gpu_idle_gaps import PAUSE_MIN_NS

    if c.n < 2:
        return 0
    start, end = c.window_start, c.window_end
    if not (start[1:] > start[:-1]).all():  # else in start order already, no two alike: no copies
        order = np.lexsort((c.index, end, start))
        start, end = start[order], end[order]
    gaps = start[1:] - np.maximum.accumulate(end)[:-1]
    gaps[(gaps < 0) | (gaps >= PAUSE_MIN_NS)] = 0
    return int(gaps.sum())


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
        "idle_gap_ns": sched.idle_gaps.total_ns(),
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
