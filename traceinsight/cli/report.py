"""`traceinsight report SAVED`: the report of traces analyzed before, rendered from their saved analysis tables
(`analyze --save DIR`, `export --parquet DIR --analysis`, a `fleet analyze` folder, or a DuckDB database holding
the tables) without analyzing anything again (traceinsight.report.saved)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from traceinsight.cli.errors import user_errors

if TYPE_CHECKING:
    pass


@click.command(name="report")
@click.argument("saved", type=click.Path(path_type=Path))
@click.option("--trace", "traces", multiple=True, metavar="NAME",
              help="Only this trace of SAVED (its key in the dataset, its path or file name); repeatable. "
                   "Default: every trace SAVED holds.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "md", "html"]), default="text",
              show_default=True, help="As in `analyze`.")
@click.option("--out", "out", default=None, type=click.Path(dir_okay=False, path_type=str),
              help="Write the output to this file instead of stdout (required for --format md).")
@click.option("--steps", "steps", type=click.Choice(["selected", "all"]), default="selected", show_default=True,
              help="Steps in --format json, as in `analyze`.")
@click.option("--max-steps", default=40, show_default=True, type=click.IntRange(min=0),
              help="Steps shown in text output (0: all).")
@click.option("--width", "width", default=None, type=click.IntRange(min=20), metavar="COLUMNS",
              help="Columns of text output, as in `analyze`.")
@click.option("--fail-on", "fail_on", type=click.Choice(["critical", "warning", "info"]), default=None,
              help="Exit with status 3 when a finding of this severity or worse was saved (for CI).")
@user_errors
def command(saved: Path, traces: tuple[str, ...], fmt: str, out: str | None, steps: str, max_steps: int,
            width: int | None, fail_on: str | None) -> None:
    """Render the report of the traces in SAVED, a folder written by `analyze --save`, `export --parquet
    --analysis` or `fleet analyze` (or a DuckDB database holding the analysis tables), from the saved tables:
    the same text, JSON, Markdown and HTML `analyze` wrote, without the traces.

    Exit status: 0 ok; 2 bad input (one line on stderr); 3 a finding at or above --fail-on."""
    from traceinsight.cli.saved_output import emit
    from traceinsight.diagnose.finding import fail_exit_code
    from traceinsight.report import saved as saved_tables

    if fmt == "md" and not out:
        raise click.UsageError("--format md needs --out FILE (its figures are written beside it)")
    src = saved_tables.open_saved(saved, traces)
    docs = emit(src, fmt, out, steps, max_steps, width)
    code = fail_exit_code([f for d in docs for f in d["findings"]], fail_on)
    if code:
        sys.exit(code)

