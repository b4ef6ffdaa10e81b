"""`python -m collectors KIND --out DIR ...` in the source tree (`python -m traceinsight.collectors` where the wheel is
installed): the `collect` command without the rest of the traceinsight CLI (this is how collectors/run_on_device.sh
runs it on a GPU machine that lacks the analyzer's dependencies)."""

from .cli import collect

collect(prog_name=f"python -m {__package__}")
