"""The `traceinsight` command: a thin shell over the library. The group is here; each command is a module of this
package holding a click command named `command` (analyze.py, sql.py, diff.py, ...), imported when used. Shared
options in options.py, failures as one line and an exit status in errors.py, warnings and the console in
output.py."""

from __future__ import annotations

from pathlib import Path

import click

from traceinsight import __version__
from traceinsight.cli.options import memory_option

# The collectors' command: the source tree's collectors/ folder, which the wheel (and an editable install) map to
# `traceinsight.collectors` (pyproject.toml's package-dir).
COLLECTORS_CLI = "traceinsight.collectors.cli"
# Modules of this package that hold no command.
NOT_COMMANDS = frozenset({"main", "__main__", "analysis_cache", "saved_output", "errors", "options", "output"})


class _Commands(click.Group):
    """The `traceinsight` group. The commands in their own modules of this package (`traceinsight/cli/<name>.py`,
    each exposing a click command `command` named like the module) and the collectors' `collect`
    (traceinsight.collectors) are imported when used, or listed (`--help`): importing all of them (and with them
    the collectors' run configuration) took ~40 ms of every `traceinsight analyze`."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_module_commands()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        return found if found is not None else _module_command(cmd_name)


def _own_commands() -> list[str]:
    """The names of the commands in modules of this package (not imported)."""
    import pkgutil

    return [info.name for info in pkgutil.iter_modules([str(Path(__file__).parent)]) if info.name not in NOT_COMMANDS]


def _module_commands() -> list[str]:
    """The names of every command: this package's and the collectors' (`collect`; looking for it imports the
    collectors package, which only `--help` needs)."""
    import importlib.util

    names = _own_commands()
    try:
        if importlib.util.find_spec(COLLECTORS_CLI) is not None:
            names.append("collect")
    except ImportError:  # no collectors package
        pass
    return names


def _module_command(name: str) -> click.Command | None:
    """The command `name` from its module (`traceinsight/cli/<name>.py`, or the collectors' `collect`), None when
    there is no such command."""
    import importlib

    if name == "collect":
        try:
            collect = getattr(importlib.import_module(COLLECTORS_CLI), "collect", None)
        except ImportError:
            return None
        return collect if isinstance(collect, click.Command) else None
    if name not in _own_commands():
        return None
    command = getattr(importlib.import_module(f"traceinsight.cli.{name}"), "command", None)
    return command if isinstance(command, click.Command) else None


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceinsight")
@memory_option
def main() -> None:
    """Analyze LLM decode-attention profiling traces: find split-KV cliffs, tail CTAs, SM idle and spikes.

    Reads Nsight Systems (.nsys-rep and its SQLite export), torch.profiler/Kineto JSON (.json, .json.gz) and
    Nsight Compute CSV (ncu --csv: the default details page or --page raw). The format is detected from the
    content.
    """
    from traceinsight.tuning import tune

    tune()  # the command's process is its own: tuned for long analyses (the library leaves a caller's alone)
