"""`fleet analyze`: find the inputs, skip those already analyzed, run the others, record every outcome.

An input is skipped when the dataset holds a complete analysis with the same analysis key: the same content
(digest of the trace, its sidecar and its ncu CSV), the same traceinsight code and the same options. A trace that failed
before is tried again. The same content under a second name is analyzed once; the second name is kept as an
alias of the first's entry.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceinsight.fleet.dataset import Dataset, analysis_key, analysis_version
from traceinsight.fleet.inputs import Input, discover, with_digests
from traceinsight.fleet.runners import RunnerSpec, runner
from traceinsight.fleet.task import DEFAULT_TABLES, Outcome, Task


@dataclass(frozen=True)
class FleetOptions:
    """What each trace's analysis returns and how it runs (the options of `traceinsight analyze` that change
    results are part of the analysis key)."""

    tables: tuple[str, ...] = DEFAULT_TABLES
    reports: tuple[str, ...] = ("json", "html")
    step_pattern: str | None = None
    limits: tuple[tuple[str, float], ...] = ()
    cache: bool = True
    force: bool = False
    timeout_s: float | None = None

    def keyed(self) -> dict[str, Any]:
        return {"tables": list(self.tables), "reports": list(self.reports), "step_pattern": self.step_pattern,
                "limits": [list(x) for x in self.limits]}


@dataclass
class FleetRun:
    """What a run did: counts, wall time, and per trace its entry (in the order the outcomes came)."""

    out_dir: Path
    runner: str
    inputs: int = 0
    analyzed: int = 0
    skipped: int = 0
    failed: int = 0
    seconds: float = 0.0
    entries: list[dict[str, Any]] = field(default_factory=list)

    def line(self) -> str:
        rate = f" ({self.analyzed / self.seconds:.2f} traces/s)" if self.analyzed and self.seconds else ""
        return (f"{self.inputs} traces: {self.analyzed} analyzed, {self.skipped} skipped (unchanged), {self.failed} "
                f"failed in {self.seconds:.1f} s{rate} on {self.runner} -> {self.out_dir}")


def analyze_fleet(args: Iterable[str], out_dir: Path, spec: RunnerSpec, options: FleetOptions = FleetOptions(),
                  on_outcome: Callable[[dict[str, Any], int, int], None] | None = None) -> FleetRun:
    """Analyze the traces `args` name into the dataset at `out_dir` (see the module docstring).
    `on_outcome(entry, done, total)` is called after each trace is recorded (for progress)."""
    t0 = time.perf_counter()
    found = discover(args)
    with runner(spec) as run:  # Ray reached (or started) before anything is written
        return _analyze(found, out_dir, spec, options, on_outcome, run, t0)


def _analyze(found: list[Input], out_dir: Path, spec: RunnerSpec, options: FleetOptions,
             on_outcome: Callable[[dict[str, Any], int, int], None] | None,
             run: Callable[[list[Task]], Iterator[Outcome]], t0: float) -> FleetRun:
    keyed = options.keyed()
    dataset = Dataset(out_dir, keyed)
    inputs = with_digests(found, dataset.known_digests())
    version = analysis_version()
    report = FleetRun(out_dir, spec.describe(), inputs=len(inputs))
    tasks: list[Task] = []
    planned: dict[str, str] = {}  # analysis key -> trace key, within this run
    for item in inputs:
        akey = analysis_key(item.digest, version, keyed)
        done = None if options.force else (dataset.done_as(akey) or planned.get(akey or ""))
        if done is not None:
            dataset.add_alias(done, item.source)
            report.skipped += 1
            continue
        key = dataset.key_for(item.source)
        dataset.reserve(key, _entry(key, item, akey))
        if akey:
            planned[akey] = key
        tasks.append(Task(key, item.source, item.sidecar, options.tables, options.reports, options.step_pattern,
                          options.limits, options.cache, options.timeout_s, item.ncu))
    dataset.save(force=True)
    try:
        for outcome in run(tasks):
            entry = dataset.write(outcome.key, outcome)
            if outcome.status == "ok":
                report.analyzed += 1
            else:
                report.failed += 1
            report.entries.append(entry)
            if on_outcome is not None:
                on_outcome(entry, len(report.entries), len(tasks))
    finally:
        dataset.save(force=True)  # also when interrupted: what was recorded stays recorded
    report.seconds = time.perf_counter() - t0
    return report


def _entry(key: str, item: Input, akey: str | None) -> dict[str, Any]:
    return {"trace": key, "source": item.source, "sidecar": item.sidecar, "ncu": item.ncu,
            "size_bytes": item.size_bytes, "fingerprint": item.fingerprint, "digest": item.digest,
            "analysis_key": akey}
