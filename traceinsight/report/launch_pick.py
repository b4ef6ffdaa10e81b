"""Which attention launch the report's Gantt shows (`worst_launch`), read from the JSON document."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traceinsight.report.finding_order import GLOBAL_FINDINGS, SPIKE_ID, sorted_findings


@dataclass(frozen=True)
class LaunchRef:
    """Where a launch is in the document, and why it was chosen."""

    step: int
    launch: int
    reason: str


def worst_launch(doc: dict[str, Any]) -> LaunchRef | None:
    """The attention launch the Gantt shows: the longest launch among the steps of the worst step-level
    finding (a simulated one when there is one); else the launch with the longest simulated tail; else the
    longest launch."""
    steps = doc.get("steps") or []
    if not steps:
        return None
    by_index = {s["index"]: s for s in steps}

    def longest(candidates: list[dict[str, Any]]) -> tuple[int, int] | None:
        """The longest launch, preferring launches the schedule model simulated (they can be drawn)."""
        best = None
        for s in candidates:
            for j, x in enumerate(s["launches"]):
                simulated = (x.get("model") or {}).get("predicted_ns") is not None
                key = (simulated, x["dur_ns"])
                if best is None or key > best[0]:
                    best = (key, s["index"], j)
        return (best[1], best[2]) if best else None

    for f in sorted_findings(doc):
        if f.get("id") in GLOBAL_FINDINGS or f.get("id") == SPIKE_ID:
            continue
        cands = [by_index[i] for i in f.get("steps") or [] if i in by_index]
        hit = longest(cands)
        if hit:
            return LaunchRef(hit[0], hit[1], f"longest launch among the steps of finding {f['id']}")
    tails = [(x["model"].get("tail_ns") or 0, s["index"], j) for s in steps for j, x in enumerate(s["launches"])
             if isinstance(x.get("model"), dict)]
    if tails:
        _, i, j = max(tails)
        return LaunchRef(i, j, "launch with the longest simulated tail")
    hit = longest(steps)
    return LaunchRef(hit[0], hit[1], "longest attention launch of the trace") if hit else None


def launch_at(doc: dict[str, Any], ref: LaunchRef) -> tuple[dict[str, Any], dict[str, Any]]:
    """(step, launch) dicts of a LaunchRef."""
    step = next(s for s in doc["steps"] if s["index"] == ref.step)
    return step, step["launches"][ref.launch]
