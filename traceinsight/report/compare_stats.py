"""How far a quantile of one sample of times moved in another, with a confidence interval: the statistics behind
`traceinsight diff`'s verdicts (docs/REPORTS.md, "Regression gate").

Method: a percentile bootstrap of the relative change after / before - 1 of a quantile (the median, p90), both
samples resampled independently, BOOTSTRAP_RESAMPLES times, from a generator seeded with BOOTSTRAP_SEED (the same
inputs give the same interval on every run and machine).

The quantile q of n values is the order statistic of rank r = ceil(q * n) (the lower median for even n). A
bootstrap resample's r-th order statistic is exactly x_(ceil(U * n)) with U ~ Beta(r, n - r + 1) (the r-th smallest
of n uniforms mapped through the sample's inverse distribution function), so each resample costs one Beta draw
whatever n is: a kernel with a million launches is resampled as fast as one with ten.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 20261204
CONFIDENCE = 0.95
# Fewer values than this on either side: no interval, no verdict (a quantile of 3 values says little).
MIN_SAMPLES = 5


@dataclass(frozen=True)
class QuantileChange:
    """The q-quantile before and after (ns), its relative change (after / before - 1) and the CONFIDENCE interval
    of that change; `low`/`high` None when either side has fewer than MIN_SAMPLES values or a zero quantile."""

    q: float
    before_ns: float
    after_ns: float
    change: float | None
    low: float | None
    high: float | None
    n_before: int
    n_after: int

    def to_json(self) -> dict[str, object]:
        return {"q": self.q, "before_ns": int(round(self.before_ns)), "after_ns": int(round(self.after_ns)),
                "change": _round(self.change), "ci_low": _round(self.low), "ci_high": _round(self.high),
                "n_before": self.n_before, "n_after": self.n_after}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 5)


def _rank(q: float, n: int) -> int:
    """1-based rank of the q-quantile among n sorted values."""
    return min(n, max(1, math.ceil(q * n)))


def quantile(sorted_values: npt.NDArray[np.float64], q: float) -> float:
    """The q-quantile (order statistic of rank ceil(q * n)) of sorted values."""
    return float(sorted_values[_rank(q, len(sorted_values)) - 1])


def _resampled(sorted_values: npt.NDArray[np.float64], q: float, rng: np.random.Generator,
               resamples: int) -> npt.NDArray[np.float64]:
    n = len(sorted_values)
    r = _rank(q, n)
    u = rng.beta(r, n - r + 1, size=resamples)
    idx = np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)
    out: npt.NDArray[np.float64] = sorted_values[idx]
    return out


def quantile_change(before: npt.ArrayLike, after: npt.ArrayLike, q: float,
                    resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                    confidence: float = CONFIDENCE) -> QuantileChange:
    """The change of the q-quantile from `before` to `after` (any order) with its bootstrap interval."""
    b = np.sort(np.asarray(before, dtype=np.float64))
    a = np.sort(np.asarray(after, dtype=np.float64))
    if not len(b) or not len(a):
        raise ValueError("quantile_change needs values on both sides")
    qb, qa = quantile(b, q), quantile(a, q)
    change = qa / qb - 1 if qb > 0 else None
    low = high = None
    if change is not None and min(len(b), len(a)) >= MIN_SAMPLES:
        rng = np.random.default_rng(seed)
        rb = _resampled(b, q, rng, resamples)
        ra = _resampled(a, q, rng, resamples)
        ok = rb > 0
        ratios = ra[ok] / rb[ok] - 1
        if len(ratios):
            alpha = (1 - confidence) / 2
            low, high = (float(v) for v in np.quantile(ratios, [alpha, 1 - alpha]))
    return QuantileChange(q, qb, qa, change, low, high, len(b), len(a))


def verdict(c: QuantileChange, threshold: float) -> str:
    """'regressed' when the whole interval lies above +threshold, 'improved' when below -threshold, else
    'unchanged' (also when there is no interval: too few values)."""
    if c.low is None or c.high is None:
        return "unchanged"
    if c.low > threshold:
        return "regressed"
    if c.high < -threshold:
        return "improved"
    return "unchanged"


def noise_floor(c: QuantileChange) -> float | None:
    """The smallest change these samples resolve: half the interval's width (None without an interval)."""
    if c.low is None or c.high is None:
        return None
    return (c.high - c.low) / 2
