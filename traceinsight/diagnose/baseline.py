"""Robust baselines for a series of step times, and the steps that break from them (pure functions).

Two baselines:
- tokens known: step time is linear in the step's total KV tokens, y = a + b * tokens: the slope b by the
  Theil-Sen estimator (median of pairwise slopes), kept between 0 and the median time per token (no negative
  per-token or fixed cost), the intercept a at the `quantile` of y - b * tokens;
- tokens unknown: a rolling `quantile` over step order (a centred window), which follows slow drift.
The baseline is a low quantile (default the lower quartile), not the median: latency spikes only go up, and in a
bad stretch more than half the steps may be slow; the lower quartile is what steps take when nothing goes
wrong. Either way the fit is repeated without the points flagged so far (a run of spikes must not become the
trend), until the flags stop changing.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Pairs used by Theil-Sen at most (a deterministic subsample above this keeps the fit O(n) in practice).
THEIL_SEN_MAX_PAIRS = 200_000
# Tokens vary by less than this ratio (max / min) across the points: fit a constant instead of a line.
FLAT_TOKENS_RATIO = 1.05
# Refits without the flagged points, at most.
MAX_ROUNDS = 5
# The baseline's quantile of the (non-flagged) step times or residuals.
BASELINE_QUANTILE = 0.25


@dataclass(frozen=True)
class SpikeFit:
    """The baseline of each point (ns), which points break from it, and how it was fitted.

    method: 'linear-in-tokens' | 'constant' (tokens known but all alike) | 'rolling-quantile';
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


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of `values` (linear interpolation between order statistics; q = 0.5 is the median)."""
    xs = sorted(values)
    if not xs:
        raise ValueError("quantile of no values")
    pos = (len(xs) - 1) * min(max(q, 0.0), 1.0)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


# Windows sorted at once by rolling_quantile (bounds its transient memory: rows x window x 4-8 bytes).
_ROWS_PER_BLOCK = 4_096


def rolling_quantile(values: Sequence[float] | np.ndarray, half_window: int,
                     use: Sequence[bool] | np.ndarray | None = None, q: float = 0.5) -> list[float]:
    """The q-quantile of the used values within [i - half_window, i + half_window] for every i (the window is
    cut at the ends). Points with use False are left out of every window; a window with no used value falls
    back to the quantile of all used values (or of all values)."""
    out: list[float] = rolling_quantiles(values, half_window, use, q).tolist()
    return out


def rolling_quantiles(values: Sequence[float] | np.ndarray, half_window: int,
                      use: Sequence[bool] | np.ndarray | None = None, q: float = 0.5) -> np.ndarray:
    """`rolling_quantile` as a float64 array, from a list or an array (no Python float per point)."""
    y = np.asarray(values, float)
    n = len(y)
    if n == 0:
        return np.zeros(0)
    used = np.ones(n, bool) if use is None else np.asarray(use, bool)
    if len(used) != n:
        raise ValueError("rolling_quantile: values and use differ in length")
    # Vectorised (a long trace has 10^5 steps): unused points and the cut ends are +inf in a padded copy, each
    # row of a sliding view is one window, sorted in C a block of rows at a time; the used values of a row are
    # its first k, interpolated exactly as `quantile` does.
    h = max(int(half_window), 0)
    padded = np.full(n + 2 * h, np.inf)
    padded[h : h + n] = np.where(used, y, np.inf)
    q = min(max(q, 0.0), 1.0)
    out = np.empty(n)
    width = 2 * h + 1
    empty = np.zeros(n, bool)
    # The used values in each window, from a running count (not a pass over every window's values).
    count = np.zeros(n + 2 * h + 1, np.int64)
    np.cumsum(np.isfinite(padded), out=count[1:])
    counts = count[width:] - count[:-width]
    # A window whose used values hold the least used value (0 for most of a component that rarely occurs) at both
    # order statistics read has that value as its quantile, exactly: such windows are not sorted.
    low = float(padded.min())
    settled = np.zeros(n, bool)
    if np.isfinite(low):
        count[1:] = np.cumsum(padded == low)
        lows = count[width:] - count[:-width]
        pos_all = (counts - 1) * q
        hi_all = np.minimum(pos_all.astype(np.int64) + 1, counts - 1)
        settled = (counts > 0) & (lows > hi_all)
        out[settled] = low
    # Every other window's row is sorted whole (numpy's vectorised sort of short rows beat np.partition: 3.3 vs
    # 7.7 ms for 16,384 rows of 101 float64), the order statistics lo and lo + 1 read from it. When many windows
    # are sorted, the rows sorted are those of each padded value's rank (int32, an argsort of the values once):
    # numpy sorts rows of int32 about 3x faster than rows of float64 (0.64 vs 1.92 ms for 4,096 rows of 101).
    # Ranks order the values as their sort does (equal values side by side, +inf then NaN last), so a row's order
    # statistics are the same values, `values_of[rank]` (only -0.0 and 0.0, equal, might come out swapped; step
    # times are never -0.0).
    values_of: np.ndarray | None = None
    windows: np.ndarray = np.lib.stride_tricks.sliding_window_view(padded, width)
    if int(np.count_nonzero((counts > 0) & ~settled)) * 4 >= n and len(padded) < np.iinfo(np.int32).max:
        order = np.argsort(padded)
        values_of = padded[order]
        rank = np.empty(len(padded), np.int32)
        rank[order] = np.arange(len(padded), dtype=np.int32)
        windows = np.lib.stride_tricks.sliding_window_view(rank, width)
        del order
    for first in range(0, n, _ROWS_PER_BLOCK):
        block = windows[first : first + _ROWS_PER_BLOCK]
        k = counts[first : first + len(block)]
        empty[first : first + len(block)] = k == 0
        todo = (k > 0) & ~settled[first : first + len(block)]
        if todo.all():
            rows = np.sort(block, axis=1)  # a copy, sorted
            ks = k
        elif todo.any():
            rows = block[todo]  # a copy, sorted in place
            rows.sort(axis=1)
            ks = k[todo]
        else:
            continue
        pos = (ks - 1) * q
        lo = pos.astype(np.int64)
        hi = np.minimum(lo + 1, ks - 1)
        at = np.arange(len(rows))
        xlo, xhi = rows[at, lo], rows[at, hi]
        if values_of is not None:
            xlo, xhi = values_of[xlo], values_of[xhi]
        got = xlo + (xhi - xlo) * (pos - lo)
        if todo.all():
            out[first : first + len(block)] = got
        else:
            out[first : first + len(block)][todo] = got
    if empty.any():  # windows with no used value: the quantile of all used values (of all values when none is)
        kept = y[used] if used.any() else y
        out[empty] = _sorted_quantile(np.sort(kept).tolist(), q)
    return out


def _sorted_quantile(xs: list[float], q: float) -> float:
    """`quantile` of values already sorted."""
    pos = (len(xs) - 1) * min(max(q, 0.0), 1.0)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


def _flags(y: Sequence[float], base: Sequence[float], ratio: float, min_excess_ns: float) -> list[bool]:
    return [yi >= ratio * bi and yi - bi >= min_excess_ns for yi, bi in zip(y, base, strict=True)]


def fit_spikes(
    y_ns: Sequence[float],
    tokens: Sequence[float | None] | None,
    *,
    ratio: float,
    min_excess_ns: float,
    half_window: int,
    q: float = BASELINE_QUANTILE,
    exclude: Sequence[bool] | None = None,
    min_fit_points: int = 5,
) -> SpikeFit:
    """Baseline each step time and flag those at least `ratio` times their baseline and `min_excess_ns` above
    it. `tokens` (per step, None where unknown): when every step has tokens, the linear-in-tokens baseline is
    used; otherwise the rolling q-quantile over step order with `half_window` steps either side.
    `exclude`: steps left out of the fit from the start (already known to be slow for a known reason), unless
    fewer than `min_fit_points` would remain; they are still judged against the baseline."""
    n = len(y_ns)
    if n == 0:
        return SpikeFit((), (), "rolling-quantile")
    y = [float(v) for v in y_ns]
    out0 = list(exclude) if exclude is not None else [False] * n
    if n - sum(out0) < min_fit_points:
        out0 = [False] * n
    flags = [False] * n
    if tokens is not None and all(t is not None for t in tokens):
        x = [float(t) for t in tokens]  # type: ignore[arg-type]
        positive = [t for t in x if t > 0]
        flat = not positive or max(positive) <= FLAT_TOKENS_RATIO * min(positive)
        method = "constant" if flat else "linear-in-tokens"
        a = b = 0.0
        base = y
        for _ in range(MAX_ROUNDS):
            idx = [i for i in range(n) if not (flags[i] or out0[i])] or list(range(n))
            if flat:
                a, b = quantile([y[i] for i in idx], q), 0.0
            else:
                _, b = theil_sen([x[i] for i in idx], [y[i] for i in idx])
                # Physical bounds: no negative cost per token, no negative fixed cost at the typical point (so
                # a line fitted on a narrow range of tokens cannot extrapolate steeply).
                per_token = [y[i] / x[i] for i in idx if x[i] > 0]
                b = min(max(b, 0.0), statistics.median(per_token)) if per_token else max(b, 0.0)
                a = quantile([y[i] - b * x[i] for i in idx], q)
            floor = min(y)
            base = [max(a + b * xi, floor) for xi in x]
            new = _flags(y, base, ratio, min_excess_ns)
            if new == flags:
                break
            flags = new
        return SpikeFit(tuple(base), tuple(flags), method, intercept_ns=a, slope_ns_per_token=b)
    baseline, spikes = rolling_spikes(np.asarray(y), np.asarray(out0, bool), ratio=ratio, min_excess_ns=min_excess_ns,
                                      half_window=half_window, q=q, min_fit_points=min_fit_points)
    return SpikeFit(tuple(baseline.tolist()), tuple(spikes.tolist()), "rolling-quantile")


def rolling_spikes(ys: np.ndarray, exclude: np.ndarray, *, ratio: float, min_excess_ns: float, half_window: int,
                   q: float = BASELINE_QUANTILE, min_fit_points: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """`fit_spikes` without tokens over arrays (float64 step times, bool `exclude`): the baseline (float64) and
    the spikes (bool), with no Python number per step (a long trace's series has 10^5-10^6 steps); the same
    comparisons as `_flags`, element by element."""
    left_out = exclude if len(ys) - int(exclude.sum()) >= min_fit_points else np.zeros(len(ys), bool)
    spikes = np.zeros(len(ys), bool)
    baseline = ys
    for _ in range(MAX_ROUNDS):
        baseline = rolling_quantiles(ys, half_window, ~(spikes | left_out), q)
        now = (ys >= ratio * baseline) & (ys - baseline >= min_excess_ns)
        if np.array_equal(now, spikes):
            break
        spikes = now
    return baseline, spikes
