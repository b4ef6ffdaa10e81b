"""Fit a CostModel to launches whose duration was measured (balanced launches of the same trace, typically).

The simulated makespan scales as 1 / k when every rate is multiplied by k, so the fit searches only the
dimensionless shape of the model (lone-CTA rate / SM rate, sharpness, HBM cap / lone-CTA rate of all SMs,
per-item overhead), and for each shape solves the overall speed and the constant launch time by weighted least
squares on the relative error. Search: from a few starting shapes, coordinate descent over a grid per
parameter, then a finer multiplicative pattern search; the lowest loss wins. A parameter only moves when that
lowers the RMS relative error by more than 0.05 percentage points, so what the samples cannot tell apart
(a set of uniform launches says nothing about how fast a lone CTA is) keeps its starting value: the backend's
default shape below, or `prior`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from traceinsight.model.gpus import GPU
from traceinsight.model.occupancy import CUDA_CORE, FA2, FA3, SM90
from traceinsight.model.planners.types import Plan
from traceinsight.model.simulate import CostModel, simulate


@dataclass(frozen=True)
class Shape:
    """Dimensionless cost-model shape.

    cta_ratio: CostModel.cta_rate / sm_rate; sharpness: CostModel.sharpness; gpu_share: HBM cap divided by
    num_SM lone CTAs' rate (num_SM * per_cta_rate(1)), None for no cap; overhead_tokens: per-item fixed work in
    KV-token equivalents.
    """

    cta_ratio: float
    sharpness: float = math.inf
    gpu_share: float | None = None
    overhead_tokens: float = 0.0


# Cost models calibrate() fitted on the H200 sweeps' uniform + two40 cases only (benchmarks/validate_model.py
# reports on the held-out skew40/60/80 cases); rates in KV tokens per ns. FA3's on our own FA3 sweeps' uniform
# + skew40 launches of both shapes (examples/fa3; benchmarks/validate_fa3.py reports the held-out skew80, call
# variants and serving replay). They give the default shapes and default_cost.
H200_COSTS: dict[str, CostModel] = {
    CUDA_CORE: CostModel(
        cta_rate=0.017138, sm_rate=0.024482, gpu_rate=None, item_overhead_tokens=0.0, launch_ns=2455.0, sharpness=3.0
    ),
    FA2: CostModel(
        cta_rate=0.082618,
        sm_rate=0.206544,
        gpu_rate=9.07998,
        item_overhead_tokens=128.0,
        launch_ns=8551.0,
        sharpness=3.0,
    ),
    SM90: CostModel(
        cta_rate=0.086815, sm_rate=0.133562, gpu_rate=8.98383, item_overhead_tokens=256.0, launch_ns=0.0, sharpness=3.0
    ),
}
H200_COSTS[FA3] = CostModel(
    cta_rate=0.102789, sm_rate=0.158137, gpu_rate=9.08511, item_overhead_tokens=187.4, launch_ns=10000.0, sharpness=3.0
)
H200_NUM_SMS = 132
H200_HBM_BYTES_PER_S = 4.8e12
GENERIC_SHAPE = Shape(cta_ratio=0.65, sharpness=3.0)  # a start that knows nothing about the backend
# Extra starting points of every fit: latency-bound (no HBM cap) and bandwidth-bound kernels.
_STARTS = (GENERIC_SHAPE, Shape(cta_ratio=0.55, sharpness=math.inf, gpu_share=0.8, overhead_tokens=64.0))

# Candidate values per shape parameter for the coordinate descent.
GRIDS: dict[str, tuple[float | None, ...]] = {
    "cta_ratio": (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0),
    "sharpness": (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0, math.inf),
    "gpu_share": (0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 1.0, 1.1, 1.25, 1.5, None),
    "overhead_tokens": (0.0, 16.0, 32.0, 64.0, 128.0, 256.0, 384.0, 512.0, 1024.0),
}
_REFINE = ("cta_ratio", "gpu_share", "overhead_tokens")  # continuous: refined multiplicatively
_REFINE_FACTORS = (1.1, 1.04, 1.015)
MAX_LAUNCH_NS = 10_000.0  # the constant per-launch time is kept physical (launch + ramp), at most 10 us
# A parameter moves only when that lowers the RMS relative error by more than this (0.05 percentage points):
# noise-level gains leave the prior alone.
_MIN_RMS_GAIN = 5e-4


def cost_model(shape: Shape, speed: float, launch_ns: float, num_sms: int) -> CostModel:
    """The CostModel with this shape whose SM rate is `speed` tokens/ns and launch time `launch_ns`."""
    base = CostModel(
        cta_rate=shape.cta_ratio * speed,
        sm_rate=speed,
        item_overhead_tokens=shape.overhead_tokens,
        launch_ns=launch_ns,
        sharpness=shape.sharpness,
    )
    if shape.gpu_share is None:
        return base
    return replace(base, gpu_rate=shape.gpu_share * base.per_cta_rate(1) * num_sms)


def shape_of(cost: CostModel, num_sms: int) -> Shape:
    """The dimensionless shape of `cost` (inverse of cost_model)."""
    share = None if cost.gpu_rate is None else cost.gpu_rate / (cost.per_cta_rate(1) * num_sms)
    return Shape(cost.cta_rate / cost.sm_rate, cost.sharpness, share, cost.item_overhead_tokens)


DEFAULT_SHAPES: dict[str, Shape] = {b: shape_of(c, H200_NUM_SMS) for b, c in H200_COSTS.items()}


def default_cost(backend: str, gpu: GPU) -> CostModel:
    """An uncalibrated CostModel for `backend` on `gpu`: the H200 fit, every rate scaled by the GPU's HBM
    bandwidth per SM relative to the H200's (a fallback; calibrate on launches of the trace when possible).
    Raises ValueError for a backend without a default.
    """
    try:
        ref = H200_COSTS[backend]
    except KeyError:
        raise ValueError(f"no default cost model for backend {backend!r}") from None
    bw = gpu.hbm_bandwidth_bytes_per_s or H200_HBM_BYTES_PER_S
    per_sm = (bw / gpu.num_sms) / (H200_HBM_BYTES_PER_S / H200_NUM_SMS)
    return replace(
        ref,
        cta_rate=ref.cta_rate * per_sm,
        sm_rate=ref.sm_rate * per_sm,
        gpu_rate=None if ref.gpu_rate is None else ref.gpu_rate * bw / H200_HBM_BYTES_PER_S,
    )


def _fit_scale(times: list[float], measured: list[float]) -> tuple[float, float, float]:
    """Least squares of (launch + s * T_i - m_i) / m_i with 0 <= launch <= MAX_LAUNCH_NS: (loss, launch, s)."""
    a11 = sum(1 / m**2 for m in measured)
    a12 = sum(t / m**2 for t, m in zip(times, measured, strict=True))
    a22 = sum(t * t / m**2 for t, m in zip(times, measured, strict=True))
    b1 = sum(1 / m for m in measured)
    b2 = sum(t / m for t, m in zip(times, measured, strict=True))
    det = a11 * a22 - a12 * a12
    launch, s = 0.0, b2 / a22
    if len(times) > 1 and det > 1e-12 * a11 * a22:
        launch = (b1 * a22 - b2 * a12) / det
        s = (a11 * b2 - a12 * b1) / det
        if launch < 0 or s <= 0:
            launch, s = 0.0, b2 / a22
        elif launch > MAX_LAUNCH_NS:
            launch = MAX_LAUNCH_NS
            s = (b2 - launch * a12) / a22
    loss = sum(((launch + s * t - m) / m) ** 2 for t, m in zip(times, measured, strict=True))
    return loss, launch, s


class _Fit:
    """Memoized loss of shapes on one sample set."""

    def __init__(self, samples: Sequence[tuple[Plan, float]], gpu: GPU, occ: int) -> None:
        self.samples, self.gpu, self.occ = samples, gpu, occ
        self.measured = [float(m) for _, m in samples]
        self.cache: dict[Shape, tuple[float, float, float]] = {}

    def __call__(self, shape: Shape) -> tuple[float, float, float]:
        hit = self.cache.get(shape)
        if hit is None:
            unit = cost_model(shape, 1.0, 0.0, self.gpu.num_sms)
            times = [simulate(p, self.gpu, self.occ, unit, detail=False).makespan_ns for p, _ in self.samples]
            hit = self.cache[shape] = _fit_scale(times, self.measured)
        return hit


def _better(loss: float, best: float, n: int) -> bool:
    """loss and best are sums of squared relative errors over n samples."""
    return math.sqrt(best / n) - math.sqrt(max(loss, 0.0) / n) > _MIN_RMS_GAIN


def _descend(fit: _Fit, shape: Shape, names: Sequence[str]) -> Shape:
    best = fit(shape)[0]
    for _ in range(6):
        moved = False
        for name in names:
            current = getattr(shape, name)
            for value in GRIDS[name]:
                if value == current:
                    continue
                change: dict[str, Any] = {name: value}  # the field named `name` takes GRIDS[name]'s values
                cand = replace(shape, **change)
                loss = fit(cand)[0]
                if _better(loss, best, len(fit.samples)):
                    best, shape, moved = loss, cand, True
        if not moved:
            break
    for factor in _REFINE_FACTORS:
        for _ in range(20):
            moved = False
            for name in (n for n in _REFINE if n in names):
                current = getattr(shape, name)
                if current is None:
                    continue
                for value in (current * factor, current / factor) if current > 0 else (8.0,):
                    cand = replace(shape, **{name: value})
                    loss = fit(cand)[0]
                    if _better(loss, best, len(fit.samples)):
                        best, shape, moved = loss, cand, True
                        break
            if not moved:
                break
    return shape


def _one_cta_per_sm(samples: Sequence[tuple[Plan, float]], gpu: GPU, occ: int) -> bool:
    """True when no sample ever has two CTAs on one SM (then only the lone-CTA speed matters)."""
    return all(
        (p.grid[0] <= gpu.num_sms) if p.persistent else (occ <= 1 or p.num_ctas <= gpu.num_sms) for p, _ in samples
    )


def calibrate(
    samples: Sequence[tuple[Plan, float]],
    gpu: GPU,
    occ: int,
    prior: Shape | None = None,
    fit: Sequence[str] = ("cta_ratio", "sharpness", "gpu_share", "overhead_tokens"),
) -> CostModel:
    """Fit a CostModel to `samples` = [(plan, measured kernel time in ns)] of one kernel on `gpu`.

    occ: resident CTAs per SM of that kernel; prior: the shape to start from and to keep where the samples
    say nothing (default: DEFAULT_SHAPES[backend]); fit: which shape parameters may move (the SM rate and the
    launch time are always fitted). Raises ValueError on an empty sample list, mixed backends or an unknown
    parameter name.
    """
    if not samples:
        raise ValueError("calibrate needs at least one (plan, measured_ns) sample")
    backends = {p.backend for p, _ in samples}
    if len(backends) != 1:
        raise ValueError(f"calibrate needs launches of one backend, got {sorted(backends)}")
    unknown = [n for n in fit if n not in GRIDS]
    if unknown:
        raise ValueError(f"unknown shape parameter(s) {unknown} (known: {', '.join(GRIDS)})")
    start = prior or DEFAULT_SHAPES.get(next(iter(backends)), GENERIC_SHAPE)
    lone = _one_cta_per_sm(samples, gpu, occ)
    names = [n for n in fit if not (lone and n in ("cta_ratio", "sharpness"))]
    evaluate = _Fit(samples, gpu, occ)
    best = _descend(evaluate, start, names)
    for other in _STARTS:
        if other == start or not names:
            continue
        if lone:  # only the lone-CTA speed matters: keep the prior's ratio and sharpness
            other = replace(other, cta_ratio=start.cta_ratio, sharpness=start.sharpness)
        cand = _descend(evaluate, replace(start, **{n: getattr(other, n) for n in names}), names)
        if _better(evaluate(cand)[0], evaluate(best)[0], len(samples)):
            best = cand
    _, launch, s = evaluate(best)
    return cost_model(best, 1.0 / s, launch, gpu.num_sms)
