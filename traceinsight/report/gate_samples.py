"""What the regression gate compares: a step group's sample (each step's GPU or wall time) and each kernel kind's
execution times, from the trace's kernels or from the document's attention launches."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from traceinsight.labels.spelling import kernel_spelling

KernelKey = tuple[str, str, str | None, str | None]  # (family, kernel spelling, phase, backend)
# What a step group's sample is: each step's GPU busy time (`breakdown.gpu_busy_ns`: the union of its kernels, the
# GPU span without a breakdown) or its wall time (`wall_ns`: what the engine waited for, host time included).
STEP_METRICS = ("gpu", "wall")


def step_time(step: Mapping[str, Any], metric: str) -> int:
    """The step's time (ns) as `metric` ('gpu' or 'wall') counts it."""
    if metric == "wall":
        return int(step.get("wall_ns") or step["dur_ns"])
    b = step.get("breakdown") or {}
    return int(b.get("gpu_busy_ns") or step["dur_ns"])


@dataclass
class KernelSamples:
    """Execution times (ns) per kernel kind of one side, and that side's step count (to price per step)."""

    durations: dict[KernelKey, list[int]] = field(default_factory=dict)
    names: dict[KernelKey, str] = field(default_factory=dict)  # a display name per key (the short kernel name)
    from_trace: bool = False

    def add(self, key: KernelKey, durs: Iterable[int], name: str) -> None:
        self.durations.setdefault(key, []).extend(int(d) for d in durs)
        self.names.setdefault(key, name)


def kernel_samples(rows: Iterable[Mapping[str, Any]]) -> KernelSamples:
    """The samples of queries/kernel_durations.sql rows (name, family, backend, durs_ns)."""
    from traceinsight.labels.templates import base_name

    out = KernelSamples(from_trace=True)
    for r in rows:
        out.add((r["family"], kernel_spelling(r["name"]), None, r.get("backend")), r["durs_ns"] or [],
                base_name(r["name"]))
    return out


def attention_samples(doc: Mapping[str, Any], into: KernelSamples | None = None) -> KernelSamples:
    """Attention launch times per (kernel kind, phase, backend) from the document's steps."""
    out = into if into is not None else KernelSamples()
    for s in doc.get("steps") or []:
        for x in s.get("launches") or []:
            key = ("attention", kernel_spelling(x.get("name") or x.get("kernel") or ""), x.get("phase"),
                   x.get("backend"))
            out.add(key, [x.get("dur_ns") or 0], x.get("kernel") or "")
    return out
