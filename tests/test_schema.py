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
    tables = {r[0] for r in db.con.execute("SELECT table_name FROM duckdb_tables() UNION ALL "
                                           "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    doc = markdown()
    assert tables >= {"traces", "devices", "kernels", "launches", "ranges", "memops", "ncu_kernels", "ncu_metrics",
                      "batches"}
    for t in tables:
        assert f"## `{t}`" in doc


def test_the_doc_gives_each_column_the_type_the_database_has():
    """Every column the doc lists has the type DuckDB gives it, a view's (`kernels`, typed in its comments) too, and
    the view `kernels` has the columns, in their order, of the table it replaced (its stored rows' without
    `name_id`, with the names of `kernel_names`)."""
    db = TraceDB()
    documented: dict[str, list[tuple[str, str]]] = {}
    table = ""
    for line in markdown().splitlines():
        if line.startswith("## `"):
            table = line[4:-1]
            documented[table] = []
        elif line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            documented[table].append((cells[0].strip("`"), cells[1]))
    actual = {t: [(r[0], r[1]) for r in db.con.execute(f"DESCRIBE {t}").fetchall()] for t in documented}
    for t, cols in documented.items():
        assert set(cols) <= set(actual[t]), t
    assert documented["kernels"] == actual["kernels"]
    stored = [c for c in actual["kernel_rows"] if c[0] != "name_id"]
    assert [c for c in actual["kernels"] if c[0] not in ("name", "mangled_name")] == stored
    assert actual["kernels"][2:4] == actual["kernel_names"][2:4] == [("name", "VARCHAR"), ("mangled_name", "VARCHAR")]


def test_every_named_query_has_a_documented_header():
    assert names()
    for n in names():
        text = sql(n)
        assert text.startswith("-- "), n
        assert "Columns:" in text, f"{n}.sql must document its columns"
