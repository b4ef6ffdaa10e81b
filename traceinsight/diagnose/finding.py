"""What a diagnostic reports: a `Finding` (frozen), its `Severity`, and the exit code CI derives from findings."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from traceinsight.errors import TraceInsightError

# Exit code of `traceinsight analyze --fail-on SEVERITY` when a finding at or above SEVERITY was reported.
# (0: nothing at that level; 1 is the CLI's internal error and 2 its usage/input error.)
EXIT_FINDINGS = 3

# What a rule's saving is measured against (its module's SAVING_BASIS): time inside steps, or between them.
BASIS_STEPS = "steps"
BASIS_SPAN = "span"


def saving_split(attributed_ns: int | None, basis: str | None) -> dict[str, int | None]:
    """A root cause's attributed saving by where it lies, as the JSON gives it beside `saving_basis`:
    saving_in_steps_ns (bounded by the steps' wall time minus their floor) and saving_between_steps_ns (bounded by
    the time between steps); both None for a finding with no attributed saving (the evidence of another)."""
    if attributed_ns is None:
        return {"saving_in_steps_ns": None, "saving_between_steps_ns": None}
    between = basis == BASIS_SPAN
    return {"saving_in_steps_ns": 0 if between else attributed_ns,
            "saving_between_steps_ns": attributed_ns if between else 0}


class Severity(StrEnum):
    """How much a finding matters: critical (the step is many times slower than it should be), warning
    (measurable loss or a risk close at hand), info (worth knowing)."""

    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """0 for critical, 1 for warning, 2 for info (sort key: most severe first)."""
        return _RANK[self]


_RANK = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}
SEVERITIES: tuple[str, ...] = tuple(s.value for s in Severity)


def severity_rank(severity: str | None) -> int:
    """Sort key of a severity given as text (findings in JSON): 0 critical, 1 warning, 2 info, 3 anything else.
    The one ranking every report, `diff` and the fleet sort by."""
    try:
        return _RANK[Severity(severity or "")]
    except ValueError:
        return len(_RANK)


@dataclass(frozen=True)
class Finding:
    """One diagnosis.

    id: the rule's stable id ('split-kv-off'); severity; steps: indexes of the steps it concerns (ascending; a
    tuple, or for many steps a `SortedInts` read as one); summary: one line; evidence: the numbers behind it,
    units in the key names (dur_ns, b_threshold, ...); explanation: one paragraph a non-kernel engineer can
    follow; remedy: what to change; saving_ns: estimated GPU time saved over those steps if the remedy is applied
    (ns), None when it cannot be computed; step_saving_ns: the same saving step by step ({step: ns}, for many
    steps an `IntMap` read as one; empty when the rule cannot place it), what each step would take less with the
    remedy, so that its time minus this is its reference (what it would still take: the balanced launch, the
    other path, the baseline step). `traceinsight.diagnose.rootcause` bounds the savings step by step with it.
    """

    id: str
    severity: Severity
    steps: Sequence[int]
    summary: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    explanation: str = ""
    remedy: str = ""
    saving_ns: int | None = None
    ref: str | None = None
    supports: str | None = None
    related: tuple[str, ...] = ()
    attributed_ns: int | None = None
    saving_basis: str | None = None
    step_saving_ns: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "severity", Severity(self.severity))
        object.__setattr__(self, "steps", _step_indexes(self.steps))
        object.__setattr__(self, "evidence", dict(self.evidence))
        if self.saving_ns is not None:
            object.__setattr__(self, "saving_ns", max(0, int(round(self.saving_ns))))
        object.__setattr__(self, "step_saving_ns", _step_savings(self.step_saving_ns))

    def to_json(self) -> dict[str, Any]:
        """The finding as schema `traceinsight.analysis/1` writes it (docs/JSON.md)."""
        return {
            "id": self.id,
            "severity": self.severity.value,
            "steps": list(self.steps),
            "summary": self.summary,
            "evidence": {k: _plain(v) for k, v in self.evidence.items()},
            "remedy": self.remedy,
            "saving_ns": self.saving_ns,
            "explanation": self.explanation,
            "ref": self.ref,
            "supports": self.supports,
            "related": list(self.related),
            "attributed_saving_ns": self.attributed_ns,
            "saving_basis": self.saving_basis,
            **saving_split(self.attributed_ns, self.saving_basis),
        }


# From this many steps a finding's steps and step savings are normalized by numpy and held as int64 arrays (a
# finding may name 10^5-10^6 steps: `model.int_keys.SortedInts` and `IntMap`, 8 and 16 bytes a step, read as the
# tuple and the dict they replace).
_MANY = 256


def _step_indexes(steps: Iterable[Any]) -> Sequence[int]:
    """Distinct step indexes as ints, ascending: a tuple, or for many a `SortedInts`."""
    if isinstance(steps, Sized) and len(steps) >= _MANY:
        import numpy as np  # here: a kept analysis renders findings without loading numpy

        from traceinsight.model.int_keys import SortedInts

        if isinstance(steps, SortedInts):
            return steps
        got: np.ndarray
        if isinstance(steps, np.ndarray) and steps.dtype == np.int64:
            got = steps
        elif isinstance(steps, tuple | list) and all(type(s) is int for s in steps[:_MANY]):
            got = np.fromiter(steps, np.int64, len(steps))
        else:
            got = np.fromiter(map(int, steps), np.int64, len(steps))
        if not (got[1:] > got[:-1]).all():  # already ascending and distinct (most are)
            got = np.unique(got)
        return SortedInts(got)
    return tuple(sorted({int(s) for s in steps}))


_INT = frozenset((int,))
_NUMBER = frozenset((int, float))


def _step_savings(savings: Mapping[Any, Any]) -> Mapping[int, int]:
    """{step: ns} with int steps and ns rounded to the nearest int (halves to even, as `round`), at least 0: a
    dict, or for many an `IntMap` (the same items, in the same order)."""
    if len(savings) >= _MANY:
        import numpy as np

        from traceinsight.model.int_keys import IntMap

        if isinstance(savings, IntMap):
            if (savings.values_ >= 0).all():
                return savings
            return IntMap(savings.keys_, np.maximum(savings.values_, 0))
        if set(map(type, savings)) <= _INT and set(map(type, savings.values())) <= _NUMBER:
            ns = np.fromiter(savings.values(), np.float64, len(savings))
            if np.isfinite(ns).all() and (np.abs(ns) < 2.0**52).all():  # exact as float64, rounded as `round` does
                return IntMap(np.fromiter(savings.keys(), np.int64, len(savings)),
                              np.maximum(np.rint(ns), 0).astype(np.int64))
    return {int(k): max(0, int(round(v))) for k, v in savings.items()}


def _plain(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, float):
        return round(v, 6)
    return v


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Most severe first; within a severity, the largest estimated saving first (unknown savings last), then
    by id and first step for a stable order."""
    return sorted(
        findings,
        key=lambda f: (
            f.severity.rank,
            f.saving_ns is None,
            -(f.saving_ns or 0),
            f.id,
            f.steps[:1],
        ),
    )


def parse_severity(value: str) -> Severity:
    """'critical' | 'warning' | 'info' (case-insensitive) -> Severity; anything else is a user error."""
    try:
        return Severity(value.strip().lower())
    except ValueError:
        raise TraceInsightError(
            f"--fail-on: unknown severity {value!r} (expected one of: {', '.join(SEVERITIES)})"
        ) from None


def fail_exit_code(findings: Iterable[Any], fail_on: str | None) -> int:
    """Exit status for CI: EXIT_FINDINGS (3) when some finding is at least as severe as `fail_on`, else 0.

    `fail_on` None (no --fail-on) always gives 0. 'warning' fails on warnings and criticals, 'info' on any
    finding. Findings may be `Finding` objects or their JSON dicts.
    """
    if fail_on is None:
        return 0
    limit = parse_severity(fail_on).rank
    for f in findings:
        sev = f.severity if isinstance(f, Finding) else Severity(f["severity"])
        if sev.rank <= limit:
            return EXIT_FINDINGS
    return 0
