"""`traceinsight analyze PATHS`: the analysis of trace files as text, JSON, a report (HTML, Markdown) or a
Chrome trace."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from traceinsight.cli.errors import user_errors
from traceinsight.cli.options import as_paths, memory_option, meta_option, ncu_option, path_arg, repeated_paths
from traceinsight.cli.output import warn, warn_analyses


@click.command(name="analyze")
@path_arg
@click.option("--format", "fmt", type=click.Choice(["text", "json", "md", "html", "perfetto"]), default="text",
              show_default=True,
              help="text (terminal), json (versioned schema traceinsight.analysis/1, docs/JSON.md), a "
                   "self-contained report: html (opens offline) or md (figures written beside --out), or perfetto: "
                   "a Chrome trace (JSON) of the trace's kernels, steps and one slice per finding, for Perfetto UI, "
                   "chrome://tracing or speedscope.")
@meta_option
@ncu_option
@click.option("--step-pattern", default=None, metavar="REGEX",
              help="Use only ranges whose name matches REGEX as steps (default: outermost ranges around attention).")
@click.option("--fail-on", "fail_on", type=click.Choice(["critical", "warning", "info"]), default=None,
              help="Exit with status 3 when a finding of this severity or worse is found (for CI).")
@click.option("--max-steps", default=40, show_default=True, type=click.IntRange(min=0),
              help="Steps shown in text output (0: all).")
@click.option("--out", "out", default=None, type=click.Path(dir_okay=False, path_type=str),
              help="Write the output to this file instead of stdout (required for --format md).")
@click.option("--steps", "steps", type=click.Choice(["selected", "all"]), default="selected", show_default=True,
              help="Steps in --format json: the steps that matter (those the findings name and the slowest; "
                   "step_summary still counts every step), or all (streamed, one step per line).")
@click.option("-q", "--quiet", is_flag=True, help="No progress display on stderr.")
@click.option("--width", "width", default=None, type=click.IntRange(min=20), metavar="COLUMNS",
              help="Columns of text output (default: $COLUMNS, else the terminal's, else 120 in a pipe or file).")
@click.option("--no-cache", is_flag=True,
              help="Read every file again and write no cache (default: reuse the cached database of an unchanged "
                   "file, kept under $TRACEINSIGHT_CACHE_DIR or ~/.cache/traceinsight).")
@click.option("--save", "save", default=None, type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Also save the analysis as a Parquet dataset in DIR (the tables of `export --parquet "
                   "--analysis`): `traceinsight report DIR` renders it again without the traces, `sql` and "
                   "DuckDB query it.")
@memory_option
@user_errors
def command(paths: tuple[str, ...], fmt: str, meta: tuple[str, ...], ncu: tuple[str, ...],
            step_pattern: str | None, fail_on: str | None, max_steps: int, out: str | None, steps: str,
            quiet: bool, width: int | None, no_cache: bool, save: Path | None) -> None:
    """Analyze trace files: GPU, kernels by family/backend, decode steps with split-KV state, the schedule
    model (thresholds, predicted times, SM idle) and findings with remedies.

    PATHS may be files, folders (searched recursively) or globs; with several traces the output adds one
    summary row per trace and the findings that stand out across them.

    Exit status: 0 ok; 2 bad input (one line on stderr); 3 a finding at or above --fail-on.
    """
    if step_pattern is not None:
        import re

        try:
            re.compile(step_pattern)
        except re.error as exc:
            raise click.BadParameter(f"not a regular expression: {exc}", param_hint="--step-pattern") from None
    if fmt == "md" and not out:
        raise click.UsageError("--format md needs --out FILE (its figures are written beside it)")
    from traceinsight.ingest.paths import expand_paths

    for p in repeated_paths(paths):
        warn(f"{p} is given twice: read once")
    traces = expand_paths(paths)
    from traceinsight.cli import analysis_cache

    kept = analysis_cache.entry_path(traces, as_paths(meta), as_paths(ncu), step_pattern, False if no_cache else None)
    if kept is not None and save is None and fmt != "perfetto" and (src := analysis_cache.lookup(kept)) is not None:
        _emit_kept(src, fmt, out, max_steps, steps, width, fail_on)  # analyzed before: its report from its tables
        return
    from traceinsight.api import open as open_analysis
    from traceinsight.diagnose.finding import fail_exit_code
    from traceinsight.report.progress import ingest_progress

    with ingest_progress(traces + as_paths(meta) + as_paths(ncu), quiet=quiet):
        result = open_analysis(traces, meta=as_paths(meta), ncu=as_paths(ncu), step_pattern=step_pattern,
                               cache=False if no_cache else None)
    db, analyses = result.db, result.analyses
    warn_analyses(analyses)
    if save is not None:
        result.save(save, no_cache)
    # Where to keep the analysis (a run's section is not kept).
    keep = kept if kept is not None and not any("run" in a.extra for a in analyses) else None
    if fmt == "perfetto":
        _emit_perfetto(result, out)
    elif keep is not None and save is None and analysis_cache.keeps(keep, traces):
        # The tables written once, into the entry, and the report read from there (not written in memory, then
        # copied); None: the entry cannot be written, the tables go into memory.
        with analysis_cache.keeping(db, analyses, keep) as src:
            _emit(result, fmt, out, max_steps, steps, width, src)
        keep = None
    else:
        _emit(result, fmt, out, max_steps, steps, width)
    if keep is not None:
        analysis_cache.store(db, analyses, keep, traces, written=True)
    code = fail_exit_code([f for a in analyses for f in a.findings], fail_on)
    if code:
        sys.exit(code)


def _emit_kept(src: Any, fmt: str, out: str | None, max_steps: int, steps: str, width: int | None,
               fail_on: str | None) -> None:
    """`analyze`'s output from a kept analysis (cli/analysis_cache.py): its warnings on stderr, the report, the
    exit status."""
    from traceinsight.cli.analysis_cache import warnings
    from traceinsight.cli.saved_output import emit
    from traceinsight.diagnose.finding import fail_exit_code

    kept = warnings(src)
    several = len(src.names) > 1
    for path, w in kept:
        warn(f"{path}: {w}" if several else w)
    docs = emit(src, fmt, out, steps, max_steps, width, warnings=False)
    code = fail_exit_code([f for d in docs for f in d["findings"]], fail_on)
    if code:
        sys.exit(code)


def _emit_perfetto(result: Any, out: str | None) -> None:
    """The Chrome trace of one analysis (report/perfetto.py), to --out or stdout."""
    from traceinsight.report import perfetto
    from traceinsight.report.json_doc import STEPS_SELECTED
    from traceinsight.report.saved import document

    db, analyses = result.db, result.analyses
    if len(analyses) != 1:
        raise click.UsageError(f"--format perfetto writes one trace; {len(analyses)} were given")
    doc = document(result.documents(), analyses[0].trace_id, STEPS_SELECTED)
    if out:
        with open(out, "wb") as fh:
            perfetto.write(db, analyses[0], doc, fh)
    else:
        perfetto.write(db, analyses[0], doc, sys.stdout.buffer)
        sys.stdout.flush()


def _emit(result: Any, fmt: str, out: str | None, max_steps: int, steps: str, width: int | None = None,
          src: Any = None) -> None:
    """The report of a fresh analysis (`traceinsight.api.Analysis`), rendered from its documents (`src`, else its
    own tables) as a kept or saved analysis is (cli/saved_output.py), with each distributed run's section after the
    text."""
    from traceinsight.cli.saved_output import emit

    analyses = result.analyses
    emit(result.documents() if src is None else src, fmt, out, steps, max_steps, width, warnings=False,
         after_text=lambda con: _emit_runs(analyses, con))


def _emit_runs(analyses: list[Any], con: Any) -> None:
    """The multi-rank section of each distributed run among the analyses (report/ranks.py)."""
    from traceinsight.report.ranks import render_run, runs_of

    for run, members in runs_of(analyses):
        con.print()
        render_run(run, [f.to_json() for f in members[0].findings if f.id == "rank-straggler"], con)
