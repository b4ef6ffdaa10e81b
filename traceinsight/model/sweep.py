"""Batch-size sweeps: steps named with `dist=… bs=…` tokens (e.g. "decode tc=0 dist=skew80 bs=384 step=2") grouped
into panels of attention time against batch size, one series per KV-length distribution, each panel with its
attention kernel and the split-KV threshold B_th the model derived for it. Computed once per analysis, when its
tables are written (`report.json_doc.trace_sections`: the document's `sweep`); the reports draw the panels as they
are. Times in ns."""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from itertools import chain, repeat
from operator import is_, itemgetter
from typing import Any

# `key=value` tokens in step names, e.g. "decode tc=0 dist=skew80 bs=384 step=2".
_TOKEN = re.compile(r"(?<![\w-])([A-Za-z_][\w-]*)=([^\s,;]+)")
# Tokens that only repeat a case (not part of what distinguishes one sweep panel from another).
_REPEAT_KEYS = frozenset({"step", "iter", "rep", "run", "i"})
_BATCH_KEYS = ("bs", "b", "batch")

# One step as `sweep_panels` reads it: (name, attention_ns, [(kernel, backend, split_kv) per attention launch]).
SweepStep = tuple[str, int, list[tuple[str | None, str | None, bool | None]]]


@dataclass
class SweepSeries:
    """Latency against batch size for one KV-length distribution (median over repeated steps, ns)."""

    dist: str
    batch: list[int] = field(default_factory=list)
    median_ns: list[int] = field(default_factory=list)
    split_off: list[bool] = field(default_factory=list)  # True where every launch of the case ran split-KV off


@dataclass
class SweepPanel:
    """One sweep (e.g. one decode path `tc=1`), with its attention kernel and the split-KV threshold."""

    key: str
    kernel: str | None
    backend: str | None
    series: list[SweepSeries]
    b_threshold: int | None
    threshold_source: str | None  # which thresholds entry gave B_th

    @property
    def threshold_text(self) -> str:
        """B_th in words: the value and where it came from, or why there is none."""
        if self.b_threshold:
            return f"B_th = {self.b_threshold} ({self.threshold_source})"
        if self.threshold_source:
            return f"no B_th: {self.threshold_source} never turns split-KV off by batch size"
        return "B_th not available (needs the schedule model's thresholds for this kernel)"

    @property
    def batch_sizes(self) -> list[int]:
        return sorted({b for s in self.series for b in s.batch})

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SweepPanel:
        return cls(d["key"], d.get("kernel"), d.get("backend"),
                   [SweepSeries(s["dist"], list(s["batch"]), list(s["median_ns"]), list(s["split_off"]))
                    for s in d.get("series") or []],
                   d.get("b_threshold"), d.get("threshold_source"))


def step_tokens(name: str) -> dict[str, str]:
    """`key=value` tokens of a step name."""
    return dict(_TOKEN.findall(name or ""))


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def threshold_for(thresholds: list[dict[str, Any]], kernel: str | None,
                  backend: str | None) -> tuple[int | None, str | None]:
    """B_th of a panel's kernel and backend from the threshold rows (the document's `thresholds`), and which row
    gave it: the kernel and backend's, else the backend's, else the kernel's."""
    matchers: tuple[Callable[[dict[str, Any]], bool], ...] = (
        lambda t: t.get("kernel") == kernel and t.get("backend") == backend,
        lambda t: t.get("backend") == backend and backend is not None,
        lambda t: t.get("kernel") == kernel and kernel is not None,
    )
    for match in matchers:
        for t in thresholds:
            if match(t):
                return t.get("b_threshold"), f"{t.get('kernel')} ({t.get('backend')}, H_kv={t.get('kv_heads')})"
    return None, None


_PAIR, _SPLIT = itemgetter(0, 1), itemgetter(2)  # of a launch's (kernel, backend, split)


def sweep_panels(steps: Iterable[SweepStep], thresholds: list[dict[str, Any]]) -> list[SweepPanel]:
    """Panels of latency vs batch size per distribution, from steps named with `dist=… bs=…` tokens. Steps
    whose names carry other tokens (like `tc=0`) are split into one panel per value; `step=`/`iter=` tokens
    only repeat a case. Empty when the trace is not such a sweep."""
    cases: dict[str, dict[str, dict[int, list[SweepStep]]]] = defaultdict(lambda: defaultdict(dict))
    for s in steps:
        if "dist=" not in s[0]:  # (most traces: no step is a sweep case; no token parsed)
            continue
        tok = step_tokens(s[0])
        b = _int(tok.get("bs") or tok.get("b") or tok.get("batch"))
        dist = tok.get("dist")
        if b is None or dist is None:
            continue
        key = " ".join(f"{k}={v}" for k, v in tok.items()
                       if k not in _BATCH_KEYS and k != "dist" and k not in _REPEAT_KEYS)
        cases[key][dist].setdefault(b, []).append(s)
    panels = []
    for key in sorted(cases):
        series = []
        kernels: Counter[tuple[str | None, str | None]] = Counter()
        for dist in sorted(cases[key], key=_dist_order):
            ser = SweepSeries(dist)
            for b in sorted(cases[key][dist]):
                case = cases[key][dist][b]
                ser.batch.append(b)
                ser.median_ns.append(int(statistics.median(s[1] for s in case)))
                launches = list(chain.from_iterable(s[2] for s in case))  # a case's 10^4-10^5 launches: in C
                ser.split_off.append(bool(launches) and all(map(is_, map(_SPLIT, launches), repeat(False))))
                kernels.update(map(_PAIR, launches))
            series.append(ser)
        if sum(len(s.batch) for s in series) < 2:
            continue
        kernel, backend = max(kernels, key=lambda k: kernels[k]) if kernels else (None, None)
        b_th, src = threshold_for(thresholds, kernel, backend)
        panels.append(SweepPanel(key or "sweep", kernel, backend, series, b_th, src))
    return panels


def _dist_order(dist: str) -> tuple[int, str]:
    """uniform first, then the others by name (skew40 < skew60 < skew80)."""
    return (0 if dist == "uniform" else 1, dist)
