"""diagnose stage: the diagnostics catalogue (one rule per module in `rules/`), findings and their savings.

    >>> from traceinsight.diagnose import diagnose, fail_exit_code
    >>> findings = diagnose(analysis)            # doctest: +SKIP
    >>> fail_exit_code(findings, "warning")      # doctest: +SKIP

docs/DIAGNOSTICS.md describes every rule.
"""

from typing import Any

from traceinsight.diagnose.finding import EXIT_FINDINGS, SEVERITIES, Finding, Severity, fail_exit_code, sort_findings

# The rule registry imports every rule (and the schedule model they read): loaded on first use, so that what
# needs only findings (a report from saved tables, `fail_exit_code`) does not pay for it.
_REGISTRY = ("RULE_IDS", "RULES", "run_rules")


def __getattr__(name: str) -> Any:
    if name in _REGISTRY:
        from traceinsight.diagnose import registry

        return getattr(registry, name)
    if name == "diagnose":
        from traceinsight.diagnose.run import diagnose

        return diagnose
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["EXIT_FINDINGS", "RULES", "RULE_IDS", "SEVERITIES", "Finding", "Severity", "diagnose", "fail_exit_code",
           "run_rules", "sort_findings"]
