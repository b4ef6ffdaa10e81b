"""The schema of the normalized database (`schema.sql`) and its table names, without DuckDB or pyarrow: what
reads saved tables needs only this."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources


def schema_sql() -> str:
    return resources.files("traceinsight.ingest").joinpath("schema.sql").read_text()


# schema.sql's line that starts the analysis tables (filled after a trace is analyzed, not by the readers).
ANALYSIS_MARKER = "-- The analysis as tables"


# Tables that hold another's rows (schema.sql's views read them): kept out of `table_names`, which names the view.
STORAGE_TABLES = ("kernel_names", "kernel_rows")


@cache
def table_names() -> tuple[str, ...]:
    """The normalized tables of `schema.sql` the readers fill, as queries see them (`kernels`, a view, and not the
    STORAGE_TABLES it reads), in the order it creates them (`traces` first)."""
    found = re.findall(r"CREATE (?:TABLE|VIEW) IF NOT EXISTS (\w+)", schema_sql().split(ANALYSIS_MARKER)[0])
    return tuple(t for t in found if t not in STORAGE_TABLES)


@cache
def stored_table_names() -> tuple[str, ...]:
    """The normalized tables of `schema.sql` as stored (the STORAGE_TABLES, not the views that read them), in the
    order it creates them: what a saved trace's database holds (`TraceDB.save_trace`)."""
    return tuple(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", schema_sql().split(ANALYSIS_MARKER)[0]))


@cache
def analysis_table_names() -> tuple[str, ...]:
    """The analysis tables of `schema.sql` (steps, findings, ...; `traceinsight.report.tables` fills them)."""
    return tuple(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", schema_sql().split(ANALYSIS_MARKER)[1]))


def analysis_schema_sql() -> str:
    """The statements of schema.sql that create the analysis tables (from its ANALYSIS_MARKER line on)."""
    return ANALYSIS_MARKER + schema_sql().split(ANALYSIS_MARKER)[1]


def mentions_analysis(query: str) -> bool:
    """Whether a user's SQL names one of the analysis tables (then the traces must be analyzed first, or their
    analysis kept)."""
    return re.search(r"\b(" + "|".join(analysis_table_names()) + r")\b", query, re.IGNORECASE) is not None
