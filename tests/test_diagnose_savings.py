"""The saving estimates and the spike baselines: small pure functions, checked against hand computations."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceinsight.diagnose import savings
from traceinsight.diagnose.baseline import fit_spikes, quantile, rolling_quantile, theil_sen


def test_cap_and_excess() -> None:
    assert savings.cap(None, 5) is None
    assert savings.cap(-3, 5) == 0 and savings.cap(9, 5) == 5 and savings.cap(4, None) == 4
    # 13.54 ms measured against a 0.34 ms balanced launch.
    assert savings.excess_over_reference_ns(13_540_000, 340_000) == 13_200_000
    assert savings.excess_over_reference_ns(300_000, 340_000) == 0


def test_balanced_and_tail_savings() -> None:
    # ncu skew80 B = 256: avg/max = 0.78 -> idle 0.22 of a 526 us kernel.
    assert savings.balanced_saving_ns(526_000, 0.22) == pytest.approx(115_720)
    assert savings.balanced_saving_ns(100, 1.5) == 100 and savings.balanced_saving_ns(100, -1) == 0
    # A 1 ms tail during which 10 % of the SMs work: 0.9 ms could be saved by spreading it.
    assert savings.tail_saving_ns(1_000_000, 0.1) == pytest.approx(900_000)


def test_wave_quantization_saving() -> None:
    # 1280 CTAs on 1188 slots: 1.077 waves take 2 -> 46 % of the time is the partial wave's loss.
    assert savings.wave_quantization_saving_ns(1_000_000, 1280, 1188) == pytest.approx(1e6 * (1 - 1280 / 1188 / 2))
    assert savings.wave_quantization_saving_ns(1_000_000, 1188, 1188) == 0
    assert savings.wave_quantization_saving_ns(1_000_000, 2376, 1188) == 0
    assert savings.wave_quantization_saving_ns(1_000_000, 5, 0) == 0


def test_bandwidth_and_roofline() -> None:
    kv = 262_144 * 2 * 128 * 4 * 2  # the sweep's KV bytes per step: 536,870,912
    assert savings.roofline_floor_ns(kv, 4.8e12) == pytest.approx(111_848.1, rel=1e-6)
    # 0.34 ms measured; at 80 % of 4.8 TB/s it would take 139.8 us.
    assert savings.bandwidth_saving_ns(340_000, kv, 4.8e12, 0.8) == pytest.approx(340_000 - kv / 3.84e12 * 1e9)
    assert savings.bandwidth_saving_ns(100_000, kv, 4.8e12, 0.8) == 0
    assert savings.bandwidth_saving_ns(1, kv, 0, 0.8) == 0


def test_idle_gap_saving() -> None:
    assert savings.idle_gap_saving_ns([10, 60_000, 50_000, 49_999], 50_000) == 110_000


def test_theil_sen_and_quantile() -> None:
    xs = [1.0, 2.0, 3.0, 4.0, 5.0]
    ys = [3.0, 5.0, 7.0, 100.0, 11.0]  # y = 1 + 2x with one wild point
    a, b = theil_sen(xs, ys)
    assert b == 2.0 and a == 1.0
    assert theil_sen([2.0, 2.0], [1.0, 3.0]) == (2.0, 0.0)
    assert quantile([4, 1, 3, 2], 0.5) == 2.5 and quantile([4, 1, 3, 2], 0.25) == 1.75
    assert rolling_quantile([1, 1, 9, 1, 1], 1, q=0.5) == [1, 1, 1, 1, 1]
    assert rolling_quantile([1, 5, 9], 0, use=[True, False, True], q=0.5) == [1, 5, 9]


def test_fit_spikes_constant_tokens_and_rolling() -> None:
    # 20 normal steps, then 12 slow ones, then 4 normal: every step holds the same tokens.
    y = [340_000.0] * 20 + [13_500_000.0] * 12 + [345_000.0] * 4
    truth = tuple([False] * 20 + [True] * 12 + [False] * 4)
    fit = fit_spikes(y, [262_144] * len(y), ratio=2.0, min_excess_ns=50_000, half_window=5)
    assert fit.method == "constant" and fit.spikes == truth
    # Without tokens the window must reach past the run: its lower quartile stays at the normal level...
    rolled = fit_spikes(y, None, ratio=2.0, min_excess_ns=50_000, half_window=12)
    assert rolled.method == "rolling-quantile" and rolled.spikes == truth
    # ...while with a short window the middle of a long run is a new level (only its edges are spikes).
    short = fit_spikes(y, None, ratio=2.0, min_excess_ns=50_000, half_window=3)
    assert short.spikes[20] and not short.spikes[26]


def test_fit_spikes_linear_in_tokens_follows_growth() -> None:
    tokens = [100_000 + 10_000 * i for i in range(30)]
    y = [50_000 + 2.0 * t for t in tokens]  # time doubles with tokens over the range: not a spike
    y[17] *= 3
    fit = fit_spikes(y, tokens, ratio=2.0, min_excess_ns=50_000, half_window=10)
    assert fit.method == "linear-in-tokens" and fit.spikes == tuple(i == 17 for i in range(30))
    assert fit.slope_ns_per_token == pytest.approx(2.0)
    # Excluding steps known to be slow keeps a long bad stretch out of the trend.
    y2 = [300_000.0] * 10 + [2_000_000.0] * 40
    plain = fit_spikes(y2, None, ratio=2.0, min_excess_ns=50_000, half_window=20)
    assert not any(plain.spikes[30:])
    known = fit_spikes(y2, None, ratio=2.0, min_excess_ns=50_000, half_window=20, exclude=[i >= 10 for i in range(50)])
    assert all(known.spikes[10:]) and not any(known.spikes[:10])


@given(st.lists(st.floats(min_value=1.0, max_value=1e9), min_size=1, max_size=60))
def test_fit_spikes_never_flags_below_ratio(y: list[float]) -> None:
    fit = fit_spikes(y, None, ratio=2.0, min_excess_ns=0, half_window=7)
    for yi, base, flag in zip(y, fit.baseline_ns, fit.spikes, strict=True):
        assert not flag or yi >= 2.0 * base
        assert math.isfinite(base)


def _rolling_by_definition(values, half_window, use, q):  # type: ignore[no-untyped-def]
    """The rolling quantile as its docstring defines it, one window at a time."""
    n = len(values)
    kept = [v for v, u in zip(values, use, strict=True) if u] or list(values)
    fallback = quantile(kept, q) if kept else 0.0
    out = []
    for i in range(n):
        window = [values[j] for j in range(max(0, i - half_window), min(n, i + half_window + 1)) if use[j]]
        out.append(quantile(window, q) if window else fallback)
    return out


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(
        st.tuples(st.one_of(st.floats(0, 1e8), st.sampled_from([0.0, 345_000.0])), st.booleans()), max_size=80
    ),
    half_window=st.integers(0, 12),
    q=st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0]),
)
def test_rolling_quantile_is_the_windowed_quantile(data, half_window, q) -> None:  # type: ignore[no-untyped-def]
    values, use = [v for v, _ in data], [u for _, u in data]
    got = rolling_quantile(values, half_window, use, q)
    want = _rolling_by_definition(values, half_window, use, q)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-9)
