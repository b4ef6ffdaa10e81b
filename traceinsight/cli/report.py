"""`traceinsight report SAVED`: the report of traces analyzed before, rendered from their saved analysis tables
(`analyze --save DIR`, `export --parquet DIR --analysis`, a `fleet analyze` folder, or a DuckDB database holding
the tables) without analyzing anything again (traceinsight.report.saved)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from traceinsight.cli.main import user_errors

if TYPE_CHECKING:
    from traceinsight.report.saved import Saved


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
    from traceinsight.diagnose.finding import fail_exit_code
    from traceinsight.report import saved as saved_tables

    if fmt == "md" and not out:
        raise click.UsageError("--format md needs --out FILE (its figures are written beside it)")
    src = saved_tables.open_saved(saved, traces)
    docs = emit(src, fmt, out, steps, max_steps, width)
    code = fail_exit_code([f for d in docs for f in d["findings"]], fail_on)
    if code:
        sys.exit(code)


def emit(src: Saved, fmt: str, out: str | None, steps: str, max_steps: int, width: int | None,
         warnings: bool = True) -> list[dict[str, Any]]:
    """Write the report of every trace of `src` as `analyze` writes it (text on stdout shows the traces' warnings
    in its header unless `warnings` is False: `analyze` writes them on stderr); return the documents (their
    findings at least, for --fail-on)."""
    from traceinsight.report import saved as saved_tables
    from traceinsight.report.json_doc import STEPS_ALL

    ids = sorted(src.names)
    if fmt == "json":
        if out:
            with open(out, "wb") as fh:
                saved_tables.write_documents(src, fh, steps)
        else:
            saved_tables.write_documents(src, sys.stdout.buffer, steps)
            sys.stdout.flush()
        return [saved_tables.findings_only(src, i) for i in ids]
    docs = [saved_tables.document(src, i, STEPS_ALL) for i in ids]
    _render(src, ids, docs, fmt, out, max_steps, width, warnings)
    return docs


def _render(src: Saved, ids: list[int], docs: list[dict[str, Any]], fmt: str, out: str | None, max_steps: int,
            width: int | None, warnings: bool) -> None:
    if fmt in ("md", "html"):
        from traceinsight.report import saved as saved_tables
        from traceinsight.report.files import render_documents, write_documents_report

        gantts = [saved_tables.gantt(src, i, d) for i, d in zip(ids, docs, strict=True)]
        if out:
            write_documents_report(docs, gantts, fmt, Path(out))
        else:
            sys.stdout.write(render_documents(docs, gantts, fmt, Path("report.html")))
        return
    from traceinsight.report.text import make_console, render_doc, render_fleet_rows

    if out:
        with open(out, "w", encoding="utf-8") as fh:
            con = make_console(file=fh, no_color=True, width=width)
            for d in docs:
                render_doc(d, con, max_steps=max_steps or None)
        return
    con = make_console(width=width)
    if len(docs) > 1:
        from traceinsight.report.fleet import unique_names

        render_fleet_rows(unique_names([dict(d["summary"]) for d in docs]), con)
        return
    for d in docs:
        render_doc(d, con, max_steps=max_steps or None, warnings=warnings)
