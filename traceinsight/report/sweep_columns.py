"""The batch-size sweep's panels (`model.sweep.sweep_panels`) from the steps as columns (`report.step_columns`):
each distinct step name parsed once, each case's steps and launches taken by numpy, and `sweep_panels` given one
step per case that stands for its steps, instead of a tuple and a token parse per step (a long trace's 10^5-10^6
steps carry a few dozen names). The same panels as `sweep_panels` of the steps (tests/test_sweep_panels.py)."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from itertools import count
from typing import Any

import numpy as np

from traceinsight.model.sweep import _BATCH_KEYS, _REPEAT_KEYS, SweepPanel, _int, step_tokens, sweep_panels
from traceinsight.report.step_columns import SPLIT_CODES, StepColumns


def _case(name: str) -> tuple[str, str, int] | None:
    """(panel key, distribution, batch size) of a step of this name, None when it is no sweep case."""
    if "dist=" not in name:
        return None
    tok = step_tokens(name)
    b = _int(tok.get("bs") or tok.get("b") or tok.get("batch"))
    dist = tok.get("dist")
    if b is None or dist is None:
        return None
    key = " ".join(f"{k}={v}" for k, v in tok.items()
                   if k not in _BATCH_KEYS and k != "dist" and k not in _REPEAT_KEYS)
    return key, dist, b


def sweep_panels_of(c: StepColumns, thresholds: list[dict[str, Any]]) -> list[SweepPanel]:
    """`sweep_panels` of the steps `c` holds: given one step per case (key, distribution, batch size) that stands
    for the case's steps, named as one of them, with their median attention time and the case's launches (one
    (kernel, backend, split) per launch, each distinct pair's in the order they first ran: what `sweep_panels`
    counts; every split False exactly when every launch of the case ran split-KV off)."""
    numbered: defaultdict[str, int] = defaultdict(count().__next__)
    name_code = np.fromiter(map(numbered.__getitem__, c.name.values), np.int64, len(c.name.values))[c.name.codes]
    cases: dict[tuple[str, str, int], tuple[str, list[int]]] = {}
    for name, code in numbered.items():
        case = _case(name)
        if case is not None:
            cases.setdefault(case, (name, []))[1].append(code)
    standing = []
    for name, codes in cases.values():
        in_case = np.isin(name_code, codes)
        steps = np.flatnonzero(in_case)
        launches = np.flatnonzero(np.repeat(in_case, c.launch_count))  # the case's steps' launches
        off = bool((c.l_split[launches] == SPLIT_CODES[False]).all())
        pairs = Counter(zip(c.k_kernel.at(launches), c.k_backend.at(launches), strict=True))
        ran = [x for (kernel, backend), n in pairs.items() for x in [(kernel, backend, False if off else None)] * n]
        standing.append((name, int(statistics.median(c.attention[steps].tolist())), ran))
    return sweep_panels(standing, thresholds)
