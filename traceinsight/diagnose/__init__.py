"""diagnose stage: the diagnostics catalogue (one rule per module in `rules/`), findings and their savings.

    >>> from traceinsight.diagnose import diagnose, fail_exit_code
    >>> findings = diagnose(analysis)            # doctest: +SKIP
    >>> fail_exit_code(findings, "warning")      # doctest: +SKIP

docs/DIAGNOSTICS.md describes every rule.
"""

from traceinsight.diagnose.finding import EXIT_FINDINGS, SEVERITIES, Finding, Severity, fail_exit_code, sort_findings
from traceinsight.diagnose.registry import RULE_IDS, RULES, diagnose, run_rules

__all__ = ["EXIT_FINDINGS", "RULES", "RULE_IDS", "SEVERITIES", "Finding", "Severity", "diagnose", "fail_exit_code",
           "run_rules", "sort_findings"]
