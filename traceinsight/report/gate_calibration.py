"""Run-to-run noise measured on A/A diffs (`diff --calibrate`): the largest change per group and family, which
widens the regression gate's thresholds."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Calibration:
    """Run-to-run noise measured on A/A diffs (two captures of one workload, `diff --format json`): per group label
    and metric the largest |change| seen (a step group per step time: `LABEL [gpu]`, `LABEL [wall]`), and per
    family (`steps-gpu`, `steps-wall` for step groups) the largest of its groups, for groups the A/A diffs did not
    have."""

    sources: tuple[str, ...]
    groups: Mapping[str, Mapping[str, float]]
    families: Mapping[str, Mapping[str, float]]

    def floor(self, group: str, family: str, metric: str) -> float:
        got = self.groups.get(group)
        if got is not None and metric in got:
            return got[metric]
        return self.families.get(family, {}).get(metric, max((f.get(metric, 0.0) for f in self.families.values()),
                                                              default=0.0))


def calibration(diffs: Sequence[tuple[str, Mapping[str, Any]]]) -> Calibration:
    """The run-to-run noise of A/A diff documents (name, traceinsight.diff/1 with its `gate`): a FormatError
    naming the file when one is not a diff with a gate."""
    from traceinsight.errors import FormatError

    groups: dict[str, dict[str, float]] = defaultdict(dict)
    families: dict[str, dict[str, float]] = defaultdict(dict)
    for name, d in diffs:
        g = d.get("gate") if isinstance(d, Mapping) else None
        if not isinstance(g, Mapping) or d.get("schema") != "traceinsight.diff/1":
            raise FormatError(f"{name}: not a diff with a regression gate (write one with traceinsight diff A1 A2 "
                              "--format json)")
        measured: list[tuple[str, str, Mapping[str, Any]]] = [
            (row["group"], row.get("family") or "", row.get("metrics") or {}) for row in g.get("kernel_groups") or []]
        for row in g.get("step_groups") or []:  # a step group per step time it was measured on
            for which, key in (("step_metric", "metrics"), ("other_metric", "other_metrics")):
                if row.get(which):
                    measured.append((f"{row['group']} [{row[which]}]", f"steps-{row[which]}", row.get(key) or {}))
        for group, fam, metrics in measured:
            for m, v in metrics.items():
                if v.get("change") is None or v.get("ci_low") is None:
                    continue
                x = abs(float(v["change"]))
                groups[group][m] = max(groups[group].get(m, 0.0), x)
                families[fam][m] = max(families[fam].get(m, 0.0), x)
    return Calibration(tuple(n for n, _ in diffs), dict(groups), dict(families))


def largest(cal: Calibration, metric: str) -> dict[str, Any] | None:
    vals = [(v[metric], k) for k, v in cal.groups.items() if metric in v]
    if not vals:
        return None
    top = max(vals)
    return {"group": top[1], "change": round(top[0], 5)}
