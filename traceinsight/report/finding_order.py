"""Findings as the reports order them: worst first (severity, then estimated saving); and the ids the report
sections single out (the latency spike; the findings about the trace as a whole)."""

from __future__ import annotations

from typing import Any

from traceinsight.diagnose.finding import severity_rank

SPIKE_ID = "latency-spike"

# Findings that concern the trace as a whole (or a model config) rather than the steps they list: they do not
# colour spikes in the timeline.
GLOBAL_FINDINGS = frozenset({"codesign", "threshold-proximity", "gpu-idle-gaps"})


def sorted_findings(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Findings, worst first: by severity, then by estimated saving (largest first), then by id."""
    return sorted(
        doc.get("findings") or [],
        key=lambda f: (severity_rank(f.get("severity")), -(f.get("saving_ns") or 0), f.get("id", "")),
    )
