"""The regression gate in words: one line per regressed or improved group, what was not gated, and the changes
the thresholds absorbed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceinsight.report.gate_groups import signed_ms

# Unchanged groups whose median moved by at least this much (and whose interval excludes 0) get a summary line
# saying the change is there but below the gate; at most BELOW_LINES of them.
BELOW_SHOWN = 0.01
BELOW_LINES = 5


def gate_lines(g: Mapping[str, Any]) -> list[str]:
    """One line per regressed / improved group with its change, interval and cause; else one line saying all
    groups are unchanged and the threshold."""
    lines = []
    for row in g["step_groups"] + g["kernel_groups"]:
        if row["verdict"] not in ("regressed", "improved"):
            continue
        lines.append(f"{row['verdict']}: {row['group']}: {change_text(row)}; {signed_ms(row['per_step_ns'] or 0)} per "
                     "step" + "".join(f"; {c['text']}" for c in row["causes"]))
    if not lines:
        n = sum(1 for r in g["step_groups"] + g["kernel_groups"] if r["verdict"])
        th = ", ".join(f"{m} {v:.0%}" for m, v in g["thresholds"].items())
        lines.append(f"no group regressed or improved beyond the thresholds ({th}): {n} groups compared")
    for row in g["step_groups"]:
        if row.get("other_verdict") in ("regressed", "improved"):
            om = row["other_metrics"]["median"]
            lines.append(f"not gated: {row['group']}: {row['other_metric']} time {row['other_verdict']}, median "
                         f"{om['change']:+.1%} [{om['ci_low']:+.1%}, {om['ci_high']:+.1%}] (steps are gated on "
                         f"{row['step_metric']} time; --step-metric {row['other_metric']} gates on this)")
    cal = g.get("calibration")
    if cal:
        big = cal["largest"].get("median")
        lines.append(f"thresholds widened per group by the run-to-run change of {len(cal['sources'])} A/A diff(s)"
                     + (f" (largest median change {big['change']:.1%}: {big['group']})" if big else ""))
    below = []
    for row in g["step_groups"] + g["kernel_groups"]:  # changes the samples show that the thresholds absorb
        med = (row.get("metrics") or {}).get("median") or {}
        if row.get("verdict") == "unchanged" and med.get("detected") and abs(med.get("change") or 0) >= BELOW_SHOWN:
            rr = med.get("run_to_run")
            why = (f"below its threshold {med['threshold']:.1%} ({g['thresholds']['median']:.1%} + run-to-run floor "
                   f"{rr:.1%})" if rr is not None else f"below the {med['threshold']:.1%} threshold")
            below.append((abs(med["change"]), f"below the gate: {row['group']}: median {med['change']:+.1%} "
                                              f"[{med['ci_low']:+.1%}, {med['ci_high']:+.1%}], {why}"))
    below.sort(key=lambda x: -x[0])
    lines += [text for _, text in below[:BELOW_LINES]]
    if len(below) > BELOW_LINES:
        lines.append(f"and {len(below) - BELOW_LINES} more groups with a smaller change below the gate")
    return lines


def change_text(row: Mapping[str, Any]) -> str:
    """'median +3.1% [+2.8%, +3.5%], p90 +1.0% [-0.5%, +2.2%]' of a paired group."""
    parts = []
    for m, v in (row.get("metrics") or {}).items():
        if v["change"] is None:
            parts.append(f"{m} -")
        elif v["ci_low"] is None:
            parts.append(f"{m} {v['change']:+.1%} (too few samples)")
        else:
            parts.append(f"{m} {v['change']:+.1%} [{v['ci_low']:+.1%}, {v['ci_high']:+.1%}]")
    return ", ".join(parts)
