"""What the diagnostics read: one trace's analysis (labels, steps, the schedule model attached to them), to
which the rules add findings. Times in ns."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from traceinsight.model.schedule import Schedule
from traceinsight.model.step_arrays import StepArrays, step_arrays
from traceinsight.model.steps import Step


@dataclass
class TraceAnalysis:
    """Everything known about one trace after analysis. Times in ns.

    schedule: thresholds, batch compositions, per-launch predictions and ncu measurements
    (`traceinsight.model.attach`), None before the model stage ran; findings: what the rules found
    (`traceinsight.diagnose.Finding`), most severe first; checks: one result per rule (fired, passed or not
    applicable, with the reason); limits: overrides of the rules' thresholds, keyed 'rule-id.CONSTANT_NAME';
    cache: views derived once and shared by the rules (step attribution, remedy facts), never serialized.
    """

    trace_id: int
    path: str
    format: str
    format_version: str | None
    tool_version: str | None
    gpu: dict[str, Any]
    start_ns: int | None
    end_ns: int | None
    warnings: list[str]
    kernels: list[dict[str, Any]]
    families: list[dict[str, Any]]
    steps: list[Step]
    findings: list[Any] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    schedule: Schedule | None = None
    checks: list[Any] = field(default_factory=list)
    limits: dict[str, float] = field(default_factory=dict)
    # What the host did within time windows ([(start_ns, end_ns)] -> host operations: CPU ranges and, for Kineto
    # traces, CPU ops read on demand); set by the pipeline, None when unavailable.
    host_ops: Callable[[list[tuple[int, int]]], list[Any]] | None = field(default=None, repr=False, compare=False)
    # Every kernel of a step (Step -> [Kernel], in start order; steps hold only their attention launches' kernels),
    # read from the database on demand; set by the pipeline.
    step_kernels: Callable[[Step], list[Any]] | None = field(default=None, repr=False, compare=False)
    # A new connection (a cursor) to the analysis's database, for the rules' scratch relations (its temporary
    # tables and registered names are its own); set by the pipeline, None without a database.
    cursor: Callable[[], Any] | None = field(default=None, repr=False, compare=False)
    # Views derived from the analysis once and shared by the rules (never written out).
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def step_arrays(self) -> StepArrays:
        """The steps as per-step arrays (wall, window, components, launches; `model.step_arrays`), read from the
        Step objects once and shared by the rules (made again when the steps or the first one's breakdown
        changed)."""
        key = (len(self.steps), id(self.steps[0].breakdown) if self.steps else None)
        got = self.cache.get("step-arrays")
        if got is None or got[0] is not self.steps or got[1] != key:
            got = self.cache["step-arrays"] = (self.steps, key, step_arrays(self.steps))
        return cast(StepArrays, got[2])

    def release_step_arrays(self) -> None:
        """Let go of `step_arrays` (its last reader, the analysis tables, is done; asked again, it is made again)."""
        self.cache.pop("step-arrays", None)

    def steps_by_index(self) -> Mapping[int, Step]:
        """The steps by their index (built once): the list itself when step i is at position i (as the pipeline
        numbers them; a dict of 10^6 steps is 0.1 GB), else a dict."""
        got = self.cache.get("steps-by-index")
        if got is None or len(got) != len(self.steps) or (isinstance(got, _Numbered) and got.steps is not self.steps):
            held = self.cache.get("step-arrays")  # the steps' arrays when the rules made them, else the objects
            numbered = (bool((held[2].index == np.arange(len(self.steps))).all())
                        if held is not None and held[0] is self.steps and held[1][0] == len(self.steps)
                        else all(s.index == i for i, s in enumerate(self.steps)))
            got = self.cache["steps-by-index"] = (_Numbered(self.steps) if numbered
                                                  else {s.index: s for s in self.steps})
        return cast(Mapping[int, Step], got)

    @property
    def dur_ns(self) -> int | None:
        if self.start_ns is None or self.end_ns is None:
            return None
        return self.end_ns - self.start_ns


class _Numbered(Mapping[int, Step]):
    """A list of steps whose step i is at position i, as a mapping from index to step."""

    __slots__ = ("steps",)

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps

    def __getitem__(self, index: int) -> Step:
        if isinstance(index, int) and 0 <= index < len(self.steps):
            return self.steps[index]
        raise KeyError(index)

    def __contains__(self, index: object) -> bool:
        return isinstance(index, int) and 0 <= index < len(self.steps)

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.steps)))

    def __len__(self) -> int:
        return len(self.steps)
