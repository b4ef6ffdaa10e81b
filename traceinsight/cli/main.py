"""The `traceinsight` command: a thin shell over the library. User errors become one stderr line and exit 2."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson

from traceinsight import __version__
from traceinsight.errors import TraceInsightError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_USAGE = 2
EXIT_INTERNAL = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a program that Ctrl-C ended


def warn(message: str) -> None:
    """One warning line on stderr, whatever the output format (stdout stays the document)."""
    click.echo(f"traceinsight: warning: {message}", err=True)


def warn_analyses(analyses: list[Any]) -> None:
    """Every analysis's warnings (a cut file, a sidecar that matches no step, an input given twice) on stderr."""
    for a in analyses:
        for w in a.warnings:
            warn(f"{a.path}: {w}" if len(analyses) > 1 else w)


def repeated_paths(paths: tuple[str, ...]) -> list[str]:
    """Plain files given more than once among `paths` (by identity, so `./t.json` and `t.json` are one)."""
    seen: set[tuple[int, int]] = set()
    out = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        if not Path(p).is_file():
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            out.append(p)
        seen.add(key)
    return out


def _fail(message: str, code: int) -> None:
    click.echo(f"traceinsight: error: {message}", err=True)
    sys.exit(code)


def user_errors(fn: F) -> F:
    """Turn TraceInsightError into one line + exit 2; anything else into one line + exit 1 (a bug:
    TRACEINSIGHT_DEBUG=1 shows the traceback)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TraceInsightError as exc:
            _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, exc.exit_code)
        except (MemoryError, _oom_errors()) as exc:
            _fail(out_of_memory_message(exc, kwargs.get("paths") or kwargs.get("path")), EXIT_USAGE)
        except KeyboardInterrupt:
            # Ctrl-C: one line and 130 (docs/ERRORS.md), not click's "Aborted!" and 1, the internal-error status.
            _fail("interrupted", EXIT_INTERRUPTED)
        except (click.exceptions.Exit, click.ClickException, BrokenPipeError):
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
            if os.environ.get("TRACEINSIGHT_DEBUG"):
                raise
            first = (str(exc).splitlines() or [""])[0]
            _fail(f"internal error: {type(exc).__name__}: {first} (rerun with TRACEINSIGHT_DEBUG=1 and report it)",
                  EXIT_INTERNAL)

    return wrapper  # type: ignore[return-value]


def _oom_errors() -> type[BaseException]:
    import duckdb

    return duckdb.OutOfMemoryException


# What analyze needs, per input (docs/SCALE.md, benchmarks/ingest_scale.py): peak memory per byte of Kineto JSON
# (uncompressed), and per Nsight Systems SQLite byte.
MEMORY_PER_KINETO_BYTE = 0.6
MEMORY_PER_SQLITE_BYTE = 10.0


def out_of_memory_message(exc: BaseException, paths: Any) -> str:
    """One line: out of memory, the limit in force, what this input needs, what to do."""
    from traceinsight.ingest.store import MEMORY_LIMIT_ENV, memory_limit

    files = [Path(p) for p in ([paths] if isinstance(paths, str) else list(paths or []))]
    sizes = []
    for f in files:
        try:
            raw = f.stat().st_size
        except OSError:
            continue
        gz = f.name.endswith(".gz")
        per = MEMORY_PER_SQLITE_BYTE if f.suffix in (".sqlite", ".nsys-rep") else MEMORY_PER_KINETO_BYTE * (10 if gz
                                                                                                             else 1)
        sizes.append(raw * per)
    total = sum(sizes)
    need = (f"; this input needs about {total / 2**30:.1f} GB" if total >= 2**30 else
            f"; this input needs about {max(total / 2**20, 1):.0f} MB") if sizes else ""
    limit = memory_limit() or "80% of memory less what the analysis holds"
    return (f"out of memory (limit: {limit}){need}: raise it with --memory-limit or ${MEMORY_LIMIT_ENV}, "
            "or capture a shorter window (docs/SCALE.md)")


def console(no_color: bool = False) -> Any:
    """stdout console for commands: colour only on a TTY and when NO_COLOR is unset."""
    from traceinsight.report.text import make_console

    return make_console(no_color=no_color)


def _paths(values: tuple[str, ...]) -> list[Path]:
    return [Path(v) for v in values]


path_arg = click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
meta_option = click.option(
    "--meta", "meta", multiple=True, type=click.Path(path_type=str),
    help="Sidecar with each step's batch composition (collector sidecar, *.meta.json[.gz], or FlashInfer's API "
         "log: FLASHINFER_LOGLEVEL=10 with its plan() dumps beside it), attached to the first trace.")
ncu_option = click.option(
    "--ncu", "ncu", multiple=True, type=click.Path(path_type=str),
    help="Nsight Compute CSV (ncu --csv, details page or --page raw) to match to the first trace's kernels.")


def _set_memory_limit(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value:
        from traceinsight.ingest.store import MEMORY_LIMIT_ENV

        os.environ[MEMORY_LIMIT_ENV] = value
    return value


memory_option = click.option(
    "--memory-limit", default=None, metavar="SIZE", expose_value=False, callback=_set_memory_limit,
    help="Cap DuckDB's memory (e.g. 8GB; also $TRACEINSIGHT_MEMORY_LIMIT; default: 80% of the machine's or "
         "container's memory less what the analysis holds outside DuckDB, re-fitted between stages). What does not "
         "fit spills to the cache folder.")


# The collectors' command: the source tree's collectors/ folder, which the wheel (and an editable install) map to
# `traceinsight.collectors` (pyproject.toml's package-dir).
COLLECTORS_CLI = "traceinsight.collectors.cli"
# Modules of this package that hold no command.
NOT_COMMANDS = frozenset({"main", "__main__", "analysis_cache", "saved_output"})


class _Commands(click.Group):
    """The `traceinsight` group. Besides the commands of this module, those in their own modules of this package
    (`traceinsight/cli/<name>.py`, each exposing a click command `command` named like the module) and the
    collectors' `collect` (traceinsight.collectors) are imported when used, or
    listed (`--help`): importing all of them (and with them the collectors' run configuration) took ~40 ms of
    every `traceinsight analyze`."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_module_commands()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        return found if found is not None else _module_command(cmd_name)


def _module_commands() -> list[str]:
    """The names of the commands that live in modules of their own (not imported)."""
    import importlib.util
    import pkgutil

    names = [info.name for info in pkgutil.iter_modules([str(Path(__file__).parent)])
             if info.name not in NOT_COMMANDS]
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
    if name not in _module_commands():
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


@main.command()
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
def analyze(paths: tuple[str, ...], fmt: str, meta: tuple[str, ...], ncu: tuple[str, ...],
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

    kept = analysis_cache.entry_path(traces, _paths(meta), _paths(ncu), step_pattern, False if no_cache else None)
    if kept is not None and save is None and fmt != "perfetto" and (src := analysis_cache.lookup(kept)) is not None:
        _emit_kept(src, fmt, out, max_steps, steps, width, fail_on)  # analyzed before: its report from its tables
        return
    from traceinsight.api import open as open_analysis
    from traceinsight.diagnose.finding import fail_exit_code
    from traceinsight.report.progress import ingest_progress

    with ingest_progress(traces + _paths(meta) + _paths(ncu), quiet=quiet):
        result = open_analysis(traces, meta=_paths(meta), ncu=_paths(ncu), step_pattern=step_pattern,
                               cache=False if no_cache else None)
    db, analyses = result.db, result.analyses
    warn_analyses(analyses)
    if save is not None:
        result.save(save, no_cache)
    if fmt == "perfetto":
        _emit_perfetto(result, out)
    else:
        _emit(result, fmt, out, max_steps, steps, width)
    if kept is not None and not any("run" in a.extra for a in analyses):  # a run's section is not kept
        analysis_cache.store(db, analyses, kept, traces, written=True)
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


def _emit(result: Any, fmt: str, out: str | None, max_steps: int, steps: str, width: int | None = None) -> None:
    """The report of a fresh analysis (`traceinsight.api.Analysis`), rendered from its documents as a kept or saved
    analysis is (cli/saved_output.py), with each distributed run's section after the text."""
    from traceinsight.cli.saved_output import emit

    analyses = result.analyses
    emit(result.documents(), fmt, out, steps, max_steps, width, warnings=False,
         after_text=lambda con: _emit_runs(analyses, con))


def _emit_runs(analyses: list[Any], con: Any) -> None:
    """The multi-rank section of each distributed run among the analyses (report/ranks.py)."""
    from traceinsight.report.ranks import render_run, runs_of

    for run, members in runs_of(analyses):
        con.print()
        render_run(run, [f.to_json() for f in members[0].findings if f.id == "rank-straggler"], con)


@main.command(name="sql")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@meta_option
@ncu_option
@user_errors
def sql_command(paths: tuple[str, ...], query: str, fmt: str, meta: tuple[str, ...], ncu: tuple[str, ...]) -> None:
    """Run QUERY on the normalized tables of the traces (see docs/SCHEMA.md): traces, devices, kernels,
    kernel_labels, launches, ranges, memops, ncu_kernels, ncu_metrics, batches; and on the analysis when the
    query names its tables: steps, step_breakdown, attention_launches, launch_models, findings, rule_checks
    (the traces are then analyzed first, as `analyze PATHS --meta ... --ncu ...` analyzes them: every path its
    own trace, sidecars and ncu CSVs given with --meta / --ncu attached to the first). A query that reads only
    those tables is answered from the analysis `analyze` kept of the same inputs, when it kept one."""
    from traceinsight.ingest.paths import expand_paths
    from traceinsight.ingest.schema import mentions_analysis

    traces = expand_paths(paths)
    from traceinsight.report.run_tables import mentions_run_tables

    if mentions_run_tables(query):  # a distributed run's tables: its ranks analyzed together now
        names, rows = _sql_runs(traces, _paths(meta), _paths(ncu), query)
    elif mentions_analysis(query):
        from traceinsight.cli import analysis_cache

        kept = analysis_cache.entry_path(traces, _paths(meta), _paths(ncu), None, None)  # `analyze`'s entry
        answer = analysis_cache.answer(kept, query) if kept is not None else None
        names, rows = answer if answer is not None else _sql_analyzed(traces, _paths(meta), _paths(ncu), query,
                                                                      kept)
    else:
        from traceinsight.ingest import load
        from traceinsight.ingest.safe_sql import readonly_query
        from traceinsight.model.kernel_table import ensure_labels

        db, _ = load(traces, meta=_paths(meta), ncu=_paths(ncu))
        ensure_labels(db)
        names, rows = readonly_query(db, query)
    if fmt == "json":
        sys.stdout.buffer.write(orjson.dumps([dict(zip(names, r, strict=True)) for r in rows],
                                             option=orjson.OPT_INDENT_2, default=str) + b"\n")
    elif fmt == "csv":
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(names)
        w.writerows(rows)
    else:
        from rich.table import Table

        t = Table(*names)
        for r in rows:
            t.add_row(*("NULL" if v is None else str(v) for v in r))
        from traceinsight.report.text import make_console

        make_console().print(t)


def _sql_runs(traces: list[Path], meta: list[Path], ncu: list[Path], query: str) -> tuple[list[str],
                                                                                         list[tuple[Any, ...]]]:
    """`sql`'s answer to a query on the run tables (report/run_tables.py): the traces analyzed now, their runs
    aligned and written as tables beside the analysis tables."""
    from traceinsight.ingest.safe_sql import readonly_query
    from traceinsight.model.kernel_table import ensure_labels
    from traceinsight.pipeline import analyze as run_analysis
    from traceinsight.report.run_tables import write_run_tables
    from traceinsight.report.tables import write_tables

    db, analyses = run_analysis(traces, meta=meta, ncu=ncu)
    write_tables(db, analyses)
    ensure_labels(db)
    write_run_tables(db, list({id(r): r for a in analyses if (r := a.cache.get("run")) is not None}.values()))
    return readonly_query(db, query)


def _sql_analyzed(traces: list[Path], meta: list[Path], ncu: list[Path], query: str,
                  kept: Path | None) -> tuple[list[str], list[tuple[Any, ...]]]:
    """`sql`'s answer from the traces analyzed now (with their analysis tables), that analysis kept as `analyze`
    keeps its own (at `kept`: a marker the first time)."""
    from traceinsight.cli import analysis_cache
    from traceinsight.ingest.safe_sql import readonly_query
    from traceinsight.model.kernel_table import ensure_labels
    from traceinsight.pipeline import analyze as run_analysis
    from traceinsight.report.tables import write_tables

    db, analyses = run_analysis(traces, meta=meta, ncu=ncu)
    write_tables(db, analyses)
    ensure_labels(db)
    answer = readonly_query(db, query)
    if kept is not None:
        analysis_cache.store(db, analyses, kept, traces, written=True)
    return answer

