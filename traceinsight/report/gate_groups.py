"""What every group row of the regression gate holds: the thresholds, the change of each metric (median, p90)
with its interval and verdict, the group's verdict, its cells, and the order rows are listed in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from traceinsight.report.compare_stats import QuantileChange, noise_floor, quantile_change, verdict
from traceinsight.report.gate_calibration import Calibration

DEFAULT_THRESHOLD = 0.05
METRICS = {"median": 0.5, "p90": 0.9}
GROUP_VERDICTS = ("regressed", "improved", "unchanged")


@dataclass(frozen=True)
class Thresholds:
    """The relative change a metric's interval must clear to count as a regression / improvement (0.05 = 5 %),
    widened per group by the run-to-run noise of A/A diffs when `calibration` is given: threshold + that group's
    largest A/A change (its family's largest for a group the A/A diffs did not have)."""

    median: float = DEFAULT_THRESHOLD
    p90: float = DEFAULT_THRESHOLD
    calibration: Calibration | None = None
    step_metric: str = "gpu"  # STEP_METRICS: what step groups are gated on

    def of(self, metric: str) -> float:
        return float(getattr(self, metric))

    def for_group(self, metric: str, group: str, family: str) -> tuple[float, float | None]:
        """(threshold for this group and metric, its run-to-run floor or None without calibration)."""
        if self.calibration is None:
            return self.of(metric), None
        floor = self.calibration.floor(group, family, metric)
        return self.of(metric) + floor, floor


def group_metrics(before: Sequence[int], after: Sequence[int], th: Thresholds, group: str,
             family: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m, q in METRICS.items():
        c = quantile_change(before, after, q)
        limit, floor = th.for_group(m, group, family)
        out[m] = {**c.to_json(), "verdict": verdict(c, limit), "threshold": _rounded(limit),
                  "noise_floor": _rounded(noise_floor(c)), "run_to_run": _rounded(floor), "detected": _detected(c)}
    return out


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 5)


def _detected(c: QuantileChange) -> bool:
    """The interval excludes no change: a change these samples show, whether or not it clears the threshold."""
    return c.low is not None and c.high is not None and (c.low > 0 or c.high < 0)


def group_verdict(metrics: Mapping[str, Any]) -> str:
    vs = [m["verdict"] for m in metrics.values()]
    if "regressed" in vs:
        return "regressed"
    return "improved" if "improved" in vs else "unchanged"


PATH_KIND = {"flashinfer-cuda-core": "CUDA-core", "flashinfer-fa2": "tensor-core", "flashinfer-sm90": "tensor-core"}


def path_text(backend: str | None) -> str:
    return f"{backend} ({PATH_KIND[backend]})" if backend in PATH_KIND else str(backend)


def median_ns(vals: Sequence[int]) -> int:
    import statistics

    return int(statistics.median(vals)) if vals else 0


def ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    order = {"regressed": 0, "improved": 1, "unchanged": 2, None: 3}
    return sorted(rows, key=lambda r: (order[r["verdict"]], -abs(r["per_step_ns"] or 0), r["group"]))


def signed_ms(ns: float) -> str:
    from traceinsight.units import fmt_ns

    return ("+" if ns > 0 else "") + fmt_ns(int(ns))
