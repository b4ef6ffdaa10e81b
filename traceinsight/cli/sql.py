"""`traceinsight sql PATHS QUERY`: SQL on the normalized tables of the traces, and on their analysis."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import orjson

from traceinsight.cli.errors import user_errors
from traceinsight.cli.options import as_paths, meta_option, ncu_option


@click.command(name="sql")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@click.argument("query")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@meta_option
@ncu_option
@user_errors
def command(paths: tuple[str, ...], query: str, fmt: str, meta: tuple[str, ...], ncu: tuple[str, ...]) -> None:
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
        names, rows = _sql_runs(traces, as_paths(meta), as_paths(ncu), query)
    elif mentions_analysis(query):
        from traceinsight.cli import analysis_cache

        kept = analysis_cache.entry_path(traces, as_paths(meta), as_paths(ncu), None, None)  # `analyze`'s entry
        answer = analysis_cache.answer(kept, query) if kept is not None else None
        names, rows = answer if answer is not None else _sql_analyzed(traces, as_paths(meta), as_paths(ncu), query,
                                                                      kept)
    else:
        from traceinsight.ingest import load
        from traceinsight.ingest.safe_sql import readonly_query
        from traceinsight.model.kernel_table import ensure_labels

        db, _ = load(traces, meta=as_paths(meta), ncu=as_paths(ncu))
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
        from traceinsight.report.console import make_console

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
