"""The diagnostics, one rule per module. `traceinsight.diagnose.registry.RULES` lists them in run order."""
