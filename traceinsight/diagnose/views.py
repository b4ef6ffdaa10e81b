"""Convenient views of a TraceAnalysis for the rules: each attention launch with its step, threshold, batch,
model and measurement. Times in ns. The per-kernel baselines (each kernel family's typical time) and the rules'
candidate selections over these launches are named SQL (`traceinsight.diagnose.launch_table`)."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable
from operator import attrgetter
from typing import NamedTuple

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.model.kernel_columns import kernel_ids
from traceinsight.model.occupancy import FA3
from traceinsight.model.phases import PREFILL_PHASES
from traceinsight.model.schedule import KernelThreshold, LaunchModel, LaunchModels, Measured, StepBatch
from traceinsight.model.steps import Launch, Step

# The cached product the launch rules declare they read (`rule.USES`): the launch views (`launch_views`) and the
# launch relation built from them (`launch_table`); the runner lets both go after their last user.
LAUNCHES = "launches"


class LaunchView(NamedTuple):
    """One attention launch and everything the model attached to it (a named tuple: a long trace has 10^5-10^6
    launches, and a frozen dataclass took three times as long to build)."""

    step: Step
    launch: Launch
    threshold: KernelThreshold | None
    batch: StepBatch | None
    model: LaunchModel | None
    measured: Measured | None
    cuda_graph: bool

    @property
    def kernel(self) -> str:
        return self.launch.attention.kernel

    @property
    def name(self) -> str:
        return self.launch.attention.name

    @property
    def backend(self) -> str | None:
        return self.launch.attention.backend

    @property
    def dur_ns(self) -> int:
        """The attention kernel's own time (ns), without its merge kernel."""
        return self.launch.attention.dur_ns

    @property
    def batch_size(self) -> int | None:
        """B when known exactly (sidecar, or the grid of an unsplit eager launch)."""
        return self.batch.batch_size if self.batch else None


def launch_views(ctx: TraceAnalysis) -> list[LaunchView]:
    """Every attention launch of every step, in step order (built once per analysis; every rule asks)."""
    s = ctx.schedule
    key = ("launch_views", id(ctx.steps), len(ctx.steps))
    if s is not None and key in s.cache:
        return list(s.cache[key])
    out = []
    if s is None:
        for step in ctx.steps:
            for launch in step.launches:
                if launch.phase not in PREFILL_PHASES:  # the decode rules do not judge prefill or mixed launches
                    out.append(LaunchView(step, launch, None, None, None, None, False))
        return out
    skip = PREFILL_PHASES  # the decode rules and models do not judge prefill or mixed launches
    steps = [step for step in ctx.steps for launch in step.launches if launch.phase not in skip]
    launches = [launch for step in ctx.steps for launch in step.launches if launch.phase not in skip]
    n = len(launches)
    ids = kernel_ids([launch.attention for launch in launches])  # from the kernels' rows, at once
    models = s.models.of(ids) if isinstance(s.models, LaunchModels) else list(map(s.models.get, ids.tolist()))
    # A column of the views' fields at a time through C getters and lookups (a long trace has 10^6 launches), the
    # views made by tuple.__new__ (a named tuple's own __new__ is a Python function: a frame per launch); no
    # lookup per launch in an empty measurement map or CUDA-graph set.
    thresholds = map(s.thresholds.get, map(_NAME, launches))
    batches = map(s.batches.get, map(_INDEX, steps))
    kid = ids.tolist() if s.measured or s.cuda_graph_kernels else []
    measured = map(s.measured.get, kid) if s.measured else itertools.repeat(None, n)
    graph = map(s.cuda_graph_kernels.__contains__, kid) if s.cuda_graph_kernels else itertools.repeat(False, n)
    out = list(map(tuple.__new__, itertools.repeat(LaunchView),
                   zip(steps, launches, thresholds, batches, models, measured, graph, strict=True)))
    s.cache[key] = tuple(out)
    return out


_NAME, _INDEX = attrgetter("attention.name"), attrgetter("index")


def release_views(ctx: TraceAnalysis) -> None:
    """Let go of the launch views `launch_views` keeps on the schedule (a named tuple per launch: 23 MB at 1M
    kernels) once the rules are done with them; asked again, they are made again."""
    s = ctx.schedule
    if s is not None:
        s.cache.pop(("launch_views", id(ctx.steps), len(ctx.steps)), None)


def backend_counts(ctx: TraceAnalysis) -> Counter[str]:
    """Launches of `launch_views` per backend ('unknown' for none), counted once per analysis."""
    s = ctx.schedule
    key = ("backend_counts", id(ctx.steps), len(ctx.steps))
    if s is not None and key in s.cache:
        return Counter(s.cache[key])
    counts: Counter[str] = Counter(v.backend or "unknown" for v in launch_views(ctx))
    if s is not None:
        s.cache[key] = dict(counts)
    return counts


def by_kernel(views: Iterable[LaunchView]) -> dict[str, list[LaunchView]]:
    """Views grouped by kernel name (one variant per group), in first-seen order."""
    out: dict[str, list[LaunchView]] = defaultdict(list)
    for v in views:
        out[v.name].append(v)
    return dict(out)


def steps_of(views: Iterable[LaunchView]) -> list[int]:
    return sorted({v.step.index for v in views})


# Runs of consecutive steps a summary names before it counts the rest (the finding's `steps` has them all).
MAX_STEP_RUNS = 10


def step_ranges(steps: list[int], max_runs: int = MAX_STEP_RUNS) -> str:
    """'3-5, 9, 12-14' for a sorted list of step indexes; past `max_runs` runs, '3-5, 9, ... and 40 more steps'
    (a summary stays one readable line however many steps a trace has)."""
    if not steps:
        return "-"
    parts: list[str] = []
    shown = 0
    start = prev = steps[0]
    for s in steps[1:] + [None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        if len(parts) == max_runs:
            rest = len(steps) - shown
            return ", ".join(parts) + f", ... and {rest} more step{'s' if rest > 1 else ''}"
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        shown += prev - start + 1
        if s is not None:
            start = prev = s
    return ", ".join(parts)


def kernel_family(v: LaunchView) -> str:
    """What launches are compared with: the kernel by name, except FlashAttention-3, whose split and unsplit
    launches are two template instances of one kernel (its Split flag): there the kernel and its tile."""
    if v.backend == FA3:
        p = v.launch.attention.params
        return f"{v.kernel}<{p.get('kBlockM')}, {p.get('kBlockN')}, {p.get('head_dim')}>"
    return v.name


def findings_by_step(findings: Iterable[object]) -> dict[int, list[object]]:
    """Step index -> findings that name it."""
    out: dict[int, list[object]] = defaultdict(list)
    for f in findings:
        for s in getattr(f, "steps", ()):
            out[s].append(f)
    return out


def spread_sample(items: list[LaunchView], n: int) -> list[LaunchView]:
    """At most n of `items`, evenly spaced in their order (all of them when there are at most n): counterfactual
    replays of many launches are priced on such a sample and scaled up."""
    if len(items) <= n:
        return list(items)
    step = (len(items) - 1) / (n - 1)
    return [items[round(i * step)] for i in range(n)]
