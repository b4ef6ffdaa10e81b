"""`python -m collectors KIND --out DIR ...`: the `collect` command without the rest of the traceinsight CLI
(this is how collectors/run_on_device.sh runs it on a GPU machine that lacks the analyzer's dependencies)."""

from collectors.cli import collect

collect(prog_name="python -m collectors")
