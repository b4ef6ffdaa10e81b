"""What every `traceinsight` command writes besides its document: warning lines on stderr, and the console."""

from __future__ import annotations

from typing import Any

import click


def warn(message: str) -> None:
    """One warning line on stderr, whatever the output format (stdout stays the document)."""
    click.echo(f"traceinsight: warning: {message}", err=True)


def warn_analyses(analyses: list[Any]) -> None:
    """Every analysis's warnings (a cut file, a sidecar that matches no step, an input given twice) on stderr."""
    for a in analyses:
        for w in a.warnings:
            warn(f"{a.path}: {w}" if len(analyses) > 1 else w)


def console(no_color: bool = False) -> Any:
    """stdout console for commands: colour only on a TTY and when NO_COLOR is unset."""
    from traceinsight.report.console import make_console

    return make_console(no_color=no_color)
