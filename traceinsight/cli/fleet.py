"""`traceinsight fleet analyze|report`: many traces into one Parquet dataset, in parallel (a local process pool
or a Ray cluster), and the report across them (docs/FLEET.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click
import orjson

from traceinsight.cli.errors import user_errors
from traceinsight.cli.options import memory_option
from traceinsight.errors import InputError

EXIT_TRACES_FAILED = 4  # the fleet ran, and some traces could not be analyzed (docs/ERRORS.md)


@click.group(name="fleet")
def command() -> None:
    """Analyze many traces in parallel into one dataset, and report across them (docs/FLEET.md)."""


def _reports(value: str) -> tuple[str, ...]:
    from traceinsight.fleet.task import REPORT_FORMATS

    if value == "none":
        return ()
    formats = tuple(v.strip() for v in value.split(",") if v.strip())
    bad = [f for f in formats if f not in REPORT_FORMATS]
    if bad:
        raise click.BadParameter(f"{', '.join(bad)}: expected none or a list of {', '.join(REPORT_FORMATS)}",
                                 param_hint="--reports")
    return formats


@command.command(name="analyze")
@click.argument("paths", nargs=-1, type=click.Path(path_type=str))
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="The dataset folder (created; a run into an existing one adds to it and skips what is done).")
@click.option("--from-list", "from_list", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A file naming the traces, one path, glob or URL per line (# comments).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes (default: the CPUs); 1 runs in this process. With --ray local: the CPUs Ray uses.")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS|auto|local",
              help="Run each trace as a Ray task: on the cluster at ADDRESS, the one this machine belongs to "
                   "(auto), or a Ray instance started for this run (local). Needs the [fleet] extra.")
@click.option("--reports", "reports", default="json,html", show_default=True, metavar="FORMATS",
              help="Each trace's own report under DIR/reports/: json, html (comma-separated), or none.")
@click.option("--tables", "tables", type=click.Choice(["analysis", "all"]), default="analysis", show_default=True,
              help="analysis: summary, analysis tables, labels, devices; all: also the normalized tables "
                   "(kernels, launches, ranges, ...: large).")
@click.option("--step-pattern", default=None, metavar="REGEX", help="As for analyze.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="The most one trace may take; a trace that takes longer is recorded as failed (timed out).")
@click.option("--force", is_flag=True, help="Analyze every trace again, even those already in the dataset.")
@click.option("--no-cache", is_flag=True, help="Read every file again (the per-file ingest cache).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="The closing summary: one line, or the run's entries as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="No line per trace on stderr.")
@memory_option
@user_errors
def analyze(paths: tuple[str, ...], out_dir: Path, from_list: Path | None, workers: int | None,
            ray_address: str | None, reports: str, tables: str, step_pattern: str | None, timeout_s: float | None,
            force: bool, no_cache: bool, fmt: str, quiet: bool) -> None:
    """Analyze every trace PATHS (files, folders, globs, URLs) name into the dataset DIR: per-trace summary,
    steps, findings, launch models and labels as hive-partitioned Parquet, each trace's reports, and a manifest.
    Traces analyzed before (same content, code and options) are skipped; a trace that fails is recorded and the
    others go on.

    Exit status: 0 every trace analyzed or skipped; 4 some failed (see DIR/manifest.json); 2 bad arguments."""
    from traceinsight.fleet.inputs import read_list
    from traceinsight.fleet.run import FleetOptions, analyze_fleet
    from traceinsight.fleet.runners import RunnerSpec
    from traceinsight.fleet.task import DEFAULT_TABLES
    from traceinsight.ingest.schema import table_names

    args = list(paths) + (read_list(from_list) if from_list else [])
    if not args:
        raise InputError("no traces named: give PATHS or --from-list FILE")
    if step_pattern is not None:
        import re

        try:
            re.compile(step_pattern)
        except re.error as exc:
            raise click.BadParameter(f"not a regular expression: {exc}", param_hint="--step-pattern") from None
    n = workers or (os.cpu_count() or 1)
    spec = RunnerSpec(workers=n, ray=ray_address)  # the memory limit: --memory-limit has set the environment
    options = FleetOptions(
        tables=DEFAULT_TABLES + (tuple(t for t in table_names() if t != "devices") if tables == "all" else ()),
        reports=_reports(reports), step_pattern=step_pattern, cache=not no_cache, force=force, timeout_s=timeout_s)

    def progress(entry: dict[str, Any], done: int, total: int) -> None:
        if quiet:
            return
        what = f"{entry['seconds']:.2f} s" if entry["status"] == "ok" else entry["error"]
        if entry["status"] == "ok" and entry.get("warnings"):
            n = len(entry["warnings"])
            what += f" ({n} warning{'s' if n > 1 else ''}: {entry['warnings'][0]})"
        click.echo(f"[{done}/{total}] {entry['status']:5} {entry['trace']}: {what}", err=True)

    result = analyze_fleet(args, out_dir, spec, options, on_outcome=progress)
    if fmt == "json":
        sys.stdout.buffer.write(orjson.dumps({"summary": result.line(), "inputs": result.inputs,
                                              "analyzed": result.analyzed, "skipped": result.skipped,
                                              "failed": result.failed, "seconds": result.seconds,
                                              "entries": result.entries}, option=orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.flush()
    else:
        click.echo(result.line())
    if result.failed:
        for e in result.entries:
            if e["status"] != "ok":
                where = "" if str(e["error"]).startswith(e["source"]) else f"{e['source']}: "
                click.echo(f"traceinsight: warning: {where}{e['error']}", err=True)
        sys.exit(EXIT_TRACES_FAILED)


@command.command(name="report")
@click.argument("dataset", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "html", "json", "md"]), default="text",
              show_default=True, help="text (terminal), html (self-contained page), json (schema "
                                      "traceinsight.fleet-report/1), md (Markdown).")
@click.option("--out", "out", default=None, type=click.Path(dir_okay=False, path_type=str),
              help="Write to this file ('-': stdout). Default: stdout, except html: DATASET/fleet.html (its links "
                   "to the traces' reports are relative, so the page works where it lies).")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Worst steps listed; text and md also list this many traces (html and json list all).")
@click.option("--width", "width", default=None, type=click.IntRange(min=20), metavar="COLUMNS",
              help="Columns of text output (default: $COLUMNS, else the terminal's, else 120 in a pipe or file).")
@user_errors
def report(dataset: Path, fmt: str, out: str | None, top: int, width: int | None) -> None:
    """The report across the traces of DATASET (a folder `fleet analyze` wrote): which traces hit which root
    causes and what they cost, each trace's figures with a link to its own report, the slowest steps of the
    fleet, the traces that stand out from the others on their GPU, and the traces that failed.

    Exit status: 0; 2 DATASET is not a fleet dataset, or the output cannot be written (nothing is written)."""
    from traceinsight.fleet.render import render_html, render_markdown, render_text
    from traceinsight.fleet.report import HTML_NAME, build, link_base
    from traceinsight.report.files import write_atomic

    doc = build(dataset, top)
    if out is None and fmt == "html":
        out = str(dataset / HTML_NAME)
    dest = None if out is None or out == "-" else Path(out)
    if dest is not None and not dest.parent.is_dir():
        raise InputError(f"{dest}: the folder {dest.parent} does not exist")
    page_dir = dest.parent if dest is not None else Path.cwd()
    if fmt == "json":
        text = orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n"
    elif fmt == "html":
        text = render_html(doc, link_base(dataset, page_dir))
    elif fmt == "md":
        text = render_markdown(doc, link_base(dataset, page_dir), top)
    else:
        import io

        from traceinsight.report.console import make_console

        if dest is None:
            render_text(doc, make_console(width=width), top)
            return
        buf = io.StringIO()
        render_text(doc, make_console(file=buf, no_color=True, width=width), top)
        text = buf.getvalue()
    if dest is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        write_atomic(dest, text)
    except OSError as exc:
        raise InputError(f"{dest}: cannot write ({exc.strerror or type(exc).__name__})"
                         + ("; give --out FILE" if out == str(dataset / HTML_NAME) else "")) from None
    click.echo(f"wrote {dest}", err=True)
