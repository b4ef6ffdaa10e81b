"""`diagnose()`: every rule of the registry run on one analysis, its findings linked to their root causes. It sits
above both the registry and `traceinsight.diagnose.rootcause` (which reads the registry's rules), so that neither
of those imports the other."""

from __future__ import annotations

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, sort_findings
from traceinsight.diagnose.registry import run_rules
from traceinsight.diagnose.rootcause import consolidate


def diagnose(ctx: TraceAnalysis) -> list[Finding]:
    """Run every rule on `ctx`; record each rule's outcome in `ctx.checks`; return the findings, most severe
    first and, within a severity, largest estimated saving first; each linked to its root cause and each root's
    saving bounded by the time it comes from (`traceinsight.diagnose.rootcause`)."""
    findings, results = run_rules(ctx)
    ctx.checks = results
    ordered = consolidate(sort_findings(findings), ctx.steps, ctx.step_arrays() if ctx.steps else None)
    ctx.findings = ordered
    return ordered
