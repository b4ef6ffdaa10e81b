"""The `traceinsight` command line. `main.py` holds the group, shared helpers and the core commands; each other
module here holds one command as a click object named `command`, registered automatically."""

from traceinsight.cli.main import main

__all__ = ["main"]
