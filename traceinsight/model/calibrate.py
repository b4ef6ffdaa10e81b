"""Fit a CostModel to launches whose duration was measured (balanced launches of the same trace, typically).

The simulated makespan scales as 1 / k when every rate is multiplied by k, so the fit searches the
dimensionless shape of the model (lone-CTA rate / SM rate, sharpness, HBM cap / all-SM rate, per-item
overhead) by coordinate descent on a grid, and for each shape solves the overall speed and the constant launch
time by weighted least squares on the relative error. Shape parameters the samples cannot tell apart (a set of
uniform launches says nothing about how fast a lone CTA is) keep their prior value: the backend's default
shape below, measured on an H200, or the `prior` given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from traceinsight.model.gpus import GPU
from traceinsight.model.occupancy import CUDA_CORE, FA2, FA3, SM90
from traceinsight.model.planners.types import Plan
from traceinsight.model.simulate import CostModel, simulate


@dataclass(frozen=True)
class Shape:
    """Dimensionless cost-model shape.

    cta_ratio: lone-CTA rate / SM rate; sharpness: CostModel.sharpness; gpu_share: HBM cap / (SM rate *
    num_SM), None for no cap; overhead_tokens: per-item fixed work in KV-token equivalents.
    """

    cta_ratio: float
    sharpness: float = math.inf
    gpu_share: float | None = None
    overhead_tokens: float = 0.0


# Default shapes per backend, fitted on the H200 sweep's uniform + two40 cases (benchmarks/validate_model.py
# holds the skew40/60/80 cases out). Used for whatever a calibration set cannot identify.
DEFAULT_SHAPES: dict[str, Shape] = {
    CUDA_CORE: Shape(cta_ratio=0.65, sharpness=3.0, gpu_share=None, overhead_tokens=0.0),
    FA2: Shape(cta_ratio=0.55, sharpness=math.inf, gpu_share=0.45, overhead_tokens=64.0),
    SM90: Shape(cta_ratio=1.0, sharpness=math.inf, gpu_share=None, overhead_tokens=256.0),
    FA3: Shape(cta_ratio=1.0, sharpness=math.inf, gpu_share=None, overhead_tokens=256.0),
}
GENERIC_SHAPE = Shape(cta_ratio=0.65, sharpness=3.0)

_RATIO_STEPS = (0.5, 0.7, 0.85, 0.93, 1 / 0.93, 1 / 0.85, 1 / 0.7, 2.0)
_SHARPNESS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0, math.inf)
_GPU_SHARES: tuple[float | None, ...] = (None, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.75, 1.0)
_OVERHEADS = (0.0, 16.0, 32.0, 64.0, 128.0, 256.0, 384.0, 512.0, 1024.0)
_MIN_GAIN = 1e-3  # a parameter moves only when the loss drops by more than this fraction


def cost_model(shape: Shape, speed: float, launch_ns: float, num_sms: int) -> CostModel:
    """The CostModel with this shape whose SM rate is `speed` tokens/ns."""
    return CostModel(
        cta_rate=shape.cta_ratio * speed,
        sm_rate=speed,
        gpu_rate=None if shape.gpu_share is None else shape.gpu_share * speed * num_sms,
        item_overhead_tokens=shape.overhead_tokens,
        launch_ns=launch_ns,
        sharpness=shape.sharpness,
    )


def _fit_scale(times: list[float], measured: list[float]) -> tuple[float, float, float]:
    """Least squares of (launch + s * T_i - m_i) / m_i: (loss, launch_ns >= 0, s > 0)."""
    # Normal equations for weights 1 / m^2 with unknowns (launch, s).
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
    loss = sum(((launch + s * t - m) / m) ** 2 for t, m in zip(times, measured, strict=True))
    return loss, launch, s


def _evaluate(shape: Shape, samples: Sequence[tuple[Plan, float]], gpu: GPU, occ: int) -> tuple[float, float, float]:
    unit = cost_model(shape, 1.0, 0.0, gpu.num_sms)
    times = [simulate(p, gpu, occ, unit).makespan_ns for p, _ in samples]
    return _fit_scale(times, [float(m) for _, m in samples])


def calibrate(
    samples: Sequence[tuple[Plan, float]],
    gpu: GPU,
    occ: int,
    prior: Shape | None = None,
    fit: Sequence[str] = ("cta_ratio", "sharpness", "gpu_share", "overhead_tokens"),
) -> CostModel:
    """Fit a CostModel to `samples` = [(plan, measured kernel time in ns)] of one kernel on `gpu`.

    occ: resident CTAs per SM of that kernel; prior: starting shape (default: DEFAULT_SHAPES[backend]);
    fit: which shape parameters may move (the SM rate and launch time are always fitted). Raises ValueError
    on an empty sample list or mixed backends.
    """
    if not samples:
        raise ValueError("calibrate needs at least one (plan, measured_ns) sample")
    backends = {p.backend for p, _ in samples}
    if len(backends) != 1:
        raise ValueError(f"calibrate needs launches of one backend, got {sorted(backends)}")
    shape = prior or DEFAULT_SHAPES.get(next(iter(backends)), GENERIC_SHAPE)
    best_loss, launch, s = _evaluate(shape, samples, gpu, occ)
    for _ in range(4):
        moved = False
        for name in fit:
            for cand in _candidates(shape, name):
                loss, cl, cs = _evaluate(cand, samples, gpu, occ)
                if loss < best_loss * (1 - _MIN_GAIN) - 1e-12:
                    best_loss, launch, s, shape, moved = loss, cl, cs, cand, True
        if not moved:
            break
    return cost_model(shape, 1.0 / s, launch, gpu.num_sms)


def _candidates(shape: Shape, name: str) -> list[Shape]:
    if name == "cta_ratio":
        return [replace(shape, cta_ratio=shape.cta_ratio * f) for f in _RATIO_STEPS]
    if name == "sharpness":
        return [replace(shape, sharpness=p) for p in _SHARPNESS if p != shape.sharpness]
    if name == "gpu_share":
        return [replace(shape, gpu_share=g) for g in _GPU_SHARES if g != shape.gpu_share]
    if name == "overhead_tokens":
        return [replace(shape, overhead_tokens=o) for o in _OVERHEADS if o != shape.overhead_tokens]
    raise ValueError(f"unknown shape parameter {name!r}")
