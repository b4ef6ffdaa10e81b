"""The `traceinsight` command line. `main.py` holds the group; each command is a module here holding a click object
named `command`, registered automatically (options.py, errors.py and output.py are what they share)."""

from traceinsight.cli.main import main

__all__ = ["main"]
