"""The batch-size sweep's panels (`model.sweep.sweep_panels`) from the steps as columns (`report.step_columns`):
each distinct step name parsed once, each case's steps and launches taken by numpy, instead of a tuple and a
token parse per step (a long trace's 10^5-10^6 steps carry a few dozen names). The same panels, equal to
`sweep_panels` of the steps (tests/test_sweep_panels.py holds the two together)."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from itertools import count
from typing import Any

import numpy as np

from traceinsight.model.sweep import (
    _BATCH_KEYS,
    _REPEAT_KEYS,
    SweepPanel,
    SweepSeries,
    _dist_order,
    _int,
    step_tokens,
    threshold_for,
)
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
    """`sweep_panels` of the steps `c` holds."""
    numbered: defaultdict[str, int] = defaultdict(count().__next__)
    name_code = np.fromiter(map(numbered.__getitem__, c.name), np.int64, c.n)
    cases: dict[str, dict[str, dict[int, list[int]]]] = defaultdict(lambda: defaultdict(dict))
    for name, code in numbered.items():
        case = _case(name)
        if case is not None:
            key, dist, b = case
            cases[key][dist].setdefault(b, []).append(code)
    kernel_of, backend_of = np.array(c.k_kernel, object), np.array(c.k_backend, object)
    panels = []
    for key in sorted(cases):
        series = []
        kernels: dict[tuple[str | None, str | None], int] = defaultdict(int)
        for dist in sorted(cases[key], key=_dist_order):
            ser = SweepSeries(dist)
            for b in sorted(cases[key][dist]):
                steps = np.flatnonzero(np.isin(name_code, cases[key][dist][b]))
                launches = np.flatnonzero(np.isin(c.step, steps))
                ser.batch.append(b)
                ser.median_ns.append(int(statistics.median(c.attention[steps].tolist())))
                ser.split_off.append(bool(len(launches)) and bool((c.l_split[launches] == SPLIT_CODES[False]).all()))
                for pair, n in Counter(zip(kernel_of[launches].tolist(), backend_of[launches].tolist(),
                                           strict=True)).items():
                    kernels[pair] += n
            series.append(ser)
        if sum(len(s.batch) for s in series) < 2:
            continue
        kernel, backend = max(kernels, key=lambda k: kernels[k]) if kernels else (None, None)
        b_th, src = threshold_for(thresholds, kernel, backend)
        panels.append(SweepPanel(key or "sweep", kernel, backend, series, b_th, src))
    return panels
