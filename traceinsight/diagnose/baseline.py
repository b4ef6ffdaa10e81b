"""Robust baselines for a series of step times, and the steps that break from them (pure functions).

Two baselines:
- tokens known: step time is linear in the step's total KV tokens, y = a + b * tokens, fitted with the
  Theil-Sen estimator (median of pairwise slopes: up to ~29 % of the points may be wild without moving it);
- tokens unknown: a rolling median over step order (a centred window), which follows slow drift.
Either way the fit is repeated without the points flagged so far (a run of spikes must not become the trend),
until the flags stop changing.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# Pairs used by Theil-Sen at most (a deterministic subsample above this keeps the fit O(n) in practice).
THEIL_SEN_MAX_PAIRS = 200_000
# Tokens vary by less than this ratio (max / min) across the points: fit a constant instead of a line.
FLAT_TOKENS_RATIO = 1.05
# Refits without the flagged points, at most.
MAX_ROUNDS = 5


@dataclass(frozen=True)
class SpikeFit:
    """The baseline of each point (ns), which points break from it, and how it was fitted.

    method: 'linear-in-tokens' | 'constant' (tokens known but all alike) | 'rolling-median';
    slope_ns_per_token / intercept_ns: the line when method is linear (else None).
    """

    baseline_ns: tuple[float, ...]
    spikes: tuple[bool, ...]
    method: str
    intercept_ns: float | None = None
    slope_ns_per_token: float | None = None


def theil_sen(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) of the Theil-Sen line through (x, y): slope = median of pairwise slopes over pairs
    with distinct x, intercept = median of y - slope * x. With fewer than two distinct x: slope 0, intercept
    median(y)."""
    n = len(x)
    if n == 0:
        raise ValueError("theil_sen needs at least one point")
    pairs = n * (n - 1) // 2
    stride = max(1, pairs // THEIL_SEN_MAX_PAIRS)
    slopes = []
    k = 0
    for i in range(n):
        for j in range(i + 1, n):
            k += 1
            if k % stride:
                continue
            dx = x[j] - x[i]
            if dx != 0:
                slopes.append((y[j] - y[i]) / dx)
    if not slopes:
        return float(statistics.median(y)), 0.0
    slope = float(statistics.median(slopes))
    intercept = float(statistics.median(yi - slope * xi for xi, yi in zip(x, y, strict=True)))
    return intercept, slope


def rolling_median(values: Sequence[float], half_window: int, use: Sequence[bool] | None = None) -> list[float]:
    """Median of the used values within [i - half_window, i + half_window] for every i (the window is cut at
    the ends). Points with use False are left out of every window; a window with no used value falls back to
    the median of all used values (or of all values)."""
    n = len(values)
    use = list(use) if use is not None else [True] * n
    kept = [v for v, u in zip(values, use, strict=True) if u] or list(values)
    fallback = float(statistics.median(kept)) if kept else 0.0
    out = []
    for i in range(n):
        lo, hi = max(0, i - half_window), min(n, i + half_window + 1)
        window = [values[j] for j in range(lo, hi) if use[j]]
        out.append(float(statistics.median(window)) if window else fallback)
    return out


def _flags(y: Sequence[float], base: Sequence[float], ratio: float, min_excess_ns: float) -> list[bool]:
    return [yi >= ratio * bi and yi - bi >= min_excess_ns for yi, bi in zip(y, base, strict=True)]


def fit_spikes(
    y_ns: Sequence[float],
    tokens: Sequence[float | None] | None,
    *,
    ratio: float,
    min_excess_ns: float,
    half_window: int,
) -> SpikeFit:
    """Baseline each step time and flag those at least `ratio` times their baseline and `min_excess_ns` above
    it. `tokens` (per step, None where unknown): when every step has tokens, the linear-in-tokens baseline is
    used; otherwise the rolling median over step order with `half_window` steps either side."""
    n = len(y_ns)
    if n == 0:
        return SpikeFit((), (), "rolling-median")
    y = [float(v) for v in y_ns]
    flags = [False] * n
    if tokens is not None and all(t is not None for t in tokens):
        x = [float(t) for t in tokens]  # type: ignore[arg-type]
        positive = [t for t in x if t > 0]
        flat = not positive or max(positive) <= FLAT_TOKENS_RATIO * min(positive)
        method = "constant" if flat else "linear-in-tokens"
        a = b = 0.0
        base = y
        for _ in range(MAX_ROUNDS):
            idx = [i for i in range(n) if not flags[i]] or list(range(n))
            if flat:
                a, b = float(statistics.median(y[i] for i in idx)), 0.0
            else:
                a, b = theil_sen([x[i] for i in idx], [y[i] for i in idx])
            floor = min(y)
            base = [max(a + b * xi, floor) for xi in x]
            new = _flags(y, base, ratio, min_excess_ns)
            if new == flags:
                break
            flags = new
        return SpikeFit(tuple(base), tuple(flags), method, intercept_ns=a, slope_ns_per_token=b)
    base = y
    for _ in range(MAX_ROUNDS):
        base = rolling_median(y, half_window, [not f for f in flags])
        new = _flags(y, base, ratio, min_excess_ns)
        if new == flags:
            break
        flags = new
    return SpikeFit(tuple(base), tuple(flags), "rolling-median")
