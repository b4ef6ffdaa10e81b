"""What pairs a step of one run with those of another run: its kind, not its index.

A step's kind is its name with the numbers taken out (`ProfilerStep#12` -> `ProfilerStep#`), its phase, its batch
size bucket (powers of two: 1, 2-3, 4-7, ..., 256-511) and the attention backend that held most of its attention
time. Kernels pair by their spelling, then by their kind: a labelling rule, in labels/spelling.py.
"""

from __future__ import annotations

import re
from typing import Any

_DIGITS = re.compile(r"\d+")


def step_name_kind(name: str) -> str:
    """The step's name without its numbers (`ProfilerStep#12` -> `ProfilerStep#`)."""
    return _DIGITS.sub("", name).strip()


def batch_bucket(batch: dict[str, Any] | None) -> str | None:
    """The power-of-two bucket of the step's batch size ('32-63'), from the exact size or the middle of its
    bounds; None when unknown."""
    if not batch:
        return None
    b = batch.get("batch_size")
    if b is None and batch.get("batch_size_min") is not None and batch.get("batch_size_max") is not None:
        b = (batch["batch_size_min"] + batch["batch_size_max"]) // 2
    if b is None or b < 1:
        return None
    lo = 1 << (int(b).bit_length() - 1)
    return str(lo) if lo == 1 else f"{lo}-{2 * lo - 1}"


def step_backend(step: dict[str, Any]) -> str | None:
    """The attention backend that held most of the step's attention launch time (None without launches)."""
    per: dict[str | None, int] = {}
    for x in step.get("launches") or []:
        per[x.get("backend")] = per.get(x.get("backend"), 0) + (x.get("dur_ns") or 0)
    return max(per, key=lambda k: per[k]) if per else None


def step_kind(step: dict[str, Any]) -> tuple[str, str, str | None, str | None]:
    """(name kind, phase, batch bucket, backend): what pairs this step with the other run's."""
    return (step_name_kind(step.get("name") or ""), step.get("phase") or "unknown", batch_bucket(step.get("batch")),
            step_backend(step))
