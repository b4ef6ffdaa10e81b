"""Estimated savings: small pure functions, one per kind of loss, each documented with its assumption.

All times are nanoseconds; results are never negative. A child estimate is capped by its parent's with `cap`
(as Nsight Compute caps a child rule's speedup by its parent's): no estimate may exceed the time it is part of.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np


def cap(saving_ns: float | None, limit_ns: float | None) -> float | None:
    """`saving_ns` limited to [0, limit_ns] (None stays None; a None limit only clamps at 0)."""
    if saving_ns is None:
        return None
    s = max(0.0, float(saving_ns))
    return s if limit_ns is None else min(s, max(0.0, float(limit_ns)))


def excess_over_reference_ns(measured_ns: float, reference_ns: float) -> float:
    """Time above what the same work takes when it runs as it should (a balanced launch, the baseline of the
    step series, the prediction with the remedy applied): max(0, measured - reference)."""
    return max(0.0, float(measured_ns) - float(reference_ns))


def balanced_saving_ns(kernel_ns: float, sm_idle_fraction: float) -> float:
    """What perfect load balance would save: the SMs' average busy time equals kernel_ns * (1 - idle), so a
    perfectly balanced kernel doing the same work ends that much earlier. Returns kernel_ns * idle (idle
    clamped to [0, 1])."""
    return float(kernel_ns) * min(1.0, max(0.0, float(sm_idle_fraction)))


def tail_saving_ns(tail_ns: float, tail_busy_fraction: float) -> float:
    """Saving from removing a tail: during the tail only `tail_busy_fraction` of the SMs work; spread over all
    SMs that work takes tail_ns * busy fraction, so the saving is tail_ns * (1 - busy fraction)."""
    busy = min(1.0, max(0.0, float(tail_busy_fraction)))
    return max(0.0, float(tail_ns)) * (1.0 - busy)


def wave_quantization_saving_ns(kernel_ns: float, ctas: int, slots: int) -> float:
    """Loss from a partial last wave when every CTA costs the same: the launch takes ceil(w) waves for
    w = ctas / slots waves of work, so a perfectly divisible grid would take kernel_ns * w / ceil(w).
    Returns kernel_ns * (1 - w / ceil(w)); 0 for at most one wave or no slots."""
    if ctas <= 0 or slots <= 0 or ctas <= slots:
        return 0.0
    waves = ctas / slots
    return float(kernel_ns) * (1.0 - waves / math.ceil(waves))


def bandwidth_saving_ns(kernel_ns: float, kv_bytes: float, peak_bytes_per_s: float, target_fraction: float) -> float:
    """Saving if the kernel streamed its KV at `target_fraction` of the peak HBM bandwidth:
    max(0, kernel_ns - kv_bytes / (peak * target) * 1e9)."""
    if peak_bytes_per_s <= 0 or target_fraction <= 0:
        return 0.0
    floor_ns = float(kv_bytes) / (float(peak_bytes_per_s) * float(target_fraction)) * 1e9
    return max(0.0, float(kernel_ns) - floor_ns)


def idle_gap_saving_ns(gaps_ns: Sequence[int] | np.ndarray, min_gap_ns: int) -> float:
    """GPU time lost to idle gaps between steps: the sum of the gaps at least `min_gap_ns` long (shorter ones
    are launch latency that no change removes). Summed as int64 (exact: ns of idle time stay far below 2^63)."""
    gaps = np.asarray(gaps_ns, np.int64)
    return float(gaps[gaps >= min_gap_ns].sum())


def roofline_floor_ns(kv_bytes: float, peak_bytes_per_s: float) -> float:
    """The least time a memory-bound decode step can take: KV bytes / peak HBM bandwidth (ns)."""
    if peak_bytes_per_s <= 0:
        return 0.0
    return float(kv_bytes) / float(peak_bytes_per_s) * 1e9


def by_step(items: Iterable[tuple[int, float]]) -> dict[int, int]:
    """Per-launch savings summed per step: {step: ns} from (step, saving_ns) pairs (negative savings count 0).
    A finding's `step_saving_ns`, which the root-cause attribution bounds step by step."""
    out: dict[int, float] = {}
    for step, saving in items:
        out[int(step)] = out.get(int(step), 0.0) + max(0.0, float(saving))
    return {s: round(v) for s, v in out.items()}


def spread_by_time(saving_ns: float, launches: Sequence[tuple[int, int]]) -> dict[int, int]:
    """A saving estimated on a sample of launches, placed step by step: each launch (step, dur_ns) takes a share
    of `saving_ns` in proportion to its time (the sample's saving per ns of kernel time, applied to every
    launch), never more than its own time. {step: ns}."""
    total = sum(max(0, d) for _, d in launches)
    if total <= 0 or saving_ns <= 0:
        return {}
    rate = min(1.0, float(saving_ns) / total)
    return by_step((s, d * rate) for s, d in launches)
