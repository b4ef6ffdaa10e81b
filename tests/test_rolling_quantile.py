"""`baseline.rolling_quantile` against the plain definition: for every point, the q-quantile (`baseline.quantile`)
of the used values within half_window either side, or the fallback when a window has none. Windows are sorted as
rows of the values' ranks when many windows need a sort, as rows of the values when few do (most settled by their
least value); both paths are exercised (ends, unused points, ties)."""

from __future__ import annotations

import random

import pytest

from traceinsight.diagnose.baseline import quantile, rolling_quantile


def _plain(values: list[float], h: int, use: list[bool], q: float) -> list[float]:
    kept = [v for v, u in zip(values, use, strict=True) if u] or list(values)
    fallback = quantile(kept, q) if kept else 0.0
    out = []
    for i in range(len(values)):
        window = [values[j] for j in range(max(0, i - h), min(len(values), i + h + 1)) if use[j]]
        out.append(quantile(window, q) if window else fallback)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_matches_the_plain_definition(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([1, 2, 7, 60, 400])
    h = rng.choice([0, 1, 3, 50])
    q = rng.choice([0.0, 0.25, 0.5, 0.9, 1.0])
    pool = [rng.uniform(-1e9, 1e9) for _ in range(5)]  # ties
    values = [rng.choice(pool) if rng.random() < 0.3 else float(rng.randrange(0, 10**7)) for _ in range(n)]
    use = [rng.random() > rng.choice([0.0, 0.1, 0.9]) for _ in range(n)]
    assert rolling_quantile(values, h, use, q) == _plain(values, h, use, q)


def test_a_long_series_every_window_full_but_the_ends() -> None:
    rng = random.Random(7)
    values = [float(rng.randrange(10**9)) for _ in range(20_000)]  # more rows than one block
    use = [True] * len(values)
    assert rolling_quantile(values, 50, use, 0.5) == _plain(values, 50, use, 0.5)
    assert rolling_quantile(values, 50, use, 0.25) == _plain(values, 50, use, 0.25)


@pytest.mark.parametrize("seed", range(8))
def test_windows_whose_quantile_is_their_least_value(seed: int) -> None:
    """A component that is mostly its least value (0 for a kind of kernel that rarely runs; here also a negative
    least value): the windows holding it at both order statistics read take it without a sort, the others as
    before; the least value on its own in a window, and windows with none of it, both occur."""
    rng = random.Random(seed)
    n = rng.choice([40, 400, 17_000])  # the last: more rows than one block
    h = rng.choice([0, 3, 50])
    q = rng.choice([0.25, 0.5, 0.9])
    least = rng.choice([0.0, -5.0])
    share = rng.choice([0.3, 0.7, 0.95])
    values = [least if rng.random() < share else float(rng.randrange(1, 10**6)) for _ in range(n)]
    use = [rng.random() > rng.choice([0.0, 0.25, 0.5]) for _ in range(n)]
    assert rolling_quantile(values, h, use, q) == _plain(values, h, use, q)
