"""The schema and the named queries are documented, and the docs are in step with the code."""

from __future__ import annotations

from conftest import REPO

from traceinsight.ingest.schema_doc import markdown
from traceinsight.ingest.store import TraceDB
from traceinsight.queries import names, sql


def test_schema_doc_is_generated_from_schema_sql():
    assert (REPO / "docs" / "SCHEMA.md").read_text() == markdown(), (
        "docs/SCHEMA.md is stale: python -m traceinsight.ingest.schema_doc > docs/SCHEMA.md"
    )


def test_every_column_is_documented():
    rows = [line for line in markdown().splitlines() if line.startswith("| `")]
    assert len(rows) > 80
    undocumented = [r for r in rows if r.rstrip().endswith("|  |")]
    assert not undocumented


def test_every_table_in_the_database_is_in_the_doc():
    db = TraceDB()
    tables = {r[0] for r in db.con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    doc = markdown()
    assert tables >= {"traces", "devices", "kernels", "launches", "ranges", "memops", "ncu_kernels", "ncu_metrics",
                      "batches"}
    for t in tables:
        assert f"## `{t}`" in doc


def test_every_named_query_has_a_documented_header():
    assert names()
    for n in names():
        text = sql(n)
        assert text.startswith("-- "), n
        assert "Columns:" in text, f"{n}.sql must document its columns"
