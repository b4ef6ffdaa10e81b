"""`traceinsight export PATH... --parquet DIR [--analysis]`: the normalized tables (and the analysis tables) of
many traces as one Parquet dataset."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson

from traceinsight.cli.errors import user_errors


@click.command(name="export")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--parquet", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Dataset folder: <table>/trace=<name>/part-0.parquet per table and trace, plus manifest.json. "
                   "Traces already in it are kept (re-exported ones are replaced).")
@click.option("--no-cache", is_flag=True, help="Read every file again instead of reusing its cached database.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="What to print: one line per trace, or the manifest entries as JSON.")
@click.option("--analysis", is_flag=True,
              help="Analyze each trace and write the analysis tables too (steps, step_breakdown, "
                   "attention_launches, launch_models, findings, rule_checks; docs/SCHEMA.md).")
@user_errors
def command(paths: tuple[str, ...], out_dir: Path, no_cache: bool, fmt: str, analysis: bool) -> None:
    """Write the normalized tables (docs/SCHEMA.md) and kernel labels of trace files as a Parquet dataset
    partitioned by trace, to query a fleet's traces together with DuckDB, Spark or Trino (docs/FLEET.md).

    PATHS are trace files, folders (searched recursively) or glob patterns."""
    from traceinsight.ingest import add_trace
    from traceinsight.ingest.parquet import export_parquet
    from traceinsight.ingest.paths import expand_paths
    from traceinsight.ingest.store import TraceDB
    from traceinsight.model.kernel_table import ensure_labels

    files = expand_paths(paths)
    written = []
    for f in files:  # one trace at a time: memory holds one trace's rows, whatever the number of files
        with TraceDB() as db:
            if analysis:
                from traceinsight.pipeline import analyze_trace
                from traceinsight.report.tables import write_tables

                trace_id = add_trace(db, f, cache=False if no_cache else None)
                write_tables(db, [analyze_trace(db, trace_id)])
            else:
                trace_id = add_trace(db, f, cache=False if no_cache else None)
            ensure_labels(db)
            done = export_parquet(db, [trace_id], out_dir, options={"no_cache": no_cache, "analysis": analysis})
            written.extend(done.traces)
            if fmt == "text":
                t = done.traces[0]
                click.echo(f"{t['trace']}\t{t['rows']['kernels']} kernels\t{t['path']}")
    if fmt == "json":
        sys.stdout.buffer.write(orjson.dumps(written, option=orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.flush()
    else:
        click.echo(f"wrote {len(written)} trace(s) to {out_dir} (manifest: {out_dir / 'manifest.json'})")
