"""The Arrow route of the nsys reader (`sqlite_arrow`) on real SQLite files: it must read every value exactly as
the SQL checks of the `sqlite3` route do (`nsys_sql.int_sql`, `valid_span`), whatever SQLite kept in a
column."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from traceinsight.ingest import nsys_sql, sqlite_arrow

I32 = nsys_sql.I32
I64 = nsys_sql.I64

# What SQLite may hold in an INTEGER column of a damaged or hand-edited export.
values = st.one_of(
    st.none(),
    st.integers(min_value=I64[0], max_value=I64[1]),
    st.integers(min_value=-5, max_value=5),
    st.floats(allow_nan=False, width=64),
    st.text(max_size=4),
    st.binary(max_size=4),
)


def _table(path: Path, rows: list[tuple[object, ...]]) -> None:
    con = sqlite3.connect(path)
    con.execute('CREATE TABLE t ("start" INTEGER, "end" INTEGER, v INTEGER)')
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    con.commit()
    con.close()


def _via_sql(path: Path, bounds: tuple[int, int]) -> tuple[list[object], list[bool]]:
    con = sqlite3.connect(path)
    try:
        rows = con.execute(
            f"SELECT {nsys_sql.int_sql('v', bounds)}, {nsys_sql.valid_span()} FROM t ORDER BY rowid"
        ).fetchall()
    finally:
        con.close()
    return [r[0] for r in rows], [bool(r[1]) for r in rows]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.tuples(values, values, values), min_size=0, max_size=40),
    lead=st.integers(min_value=0, max_value=1500),
    bounds=st.sampled_from([I32, I64, (1, I32[1])]),
)
# Durations that overflow int64 (end - start > 2^63 - 1) and one that just fits.
@example(rows=[(-10, I64[1], 0), (I64[0], 0, 0), (-1, I64[1] - 1, 0), (5, 4, 2**31)], lead=0, bounds=I32)
def test_arrow_route_reads_like_the_sql_checks(tmp_path_factory: pytest.TempPathFactory, rows, lead, bounds) -> None:
    # `lead` good rows first: the driver types a column from its first rows, so a bad value past them is the
    # case that makes it stop (and the route retry with every value wrapped).
    path = tmp_path_factory.mktemp("arrow") / "t.sqlite"
    _table(path, [(i, i + 1, i) for i in range(lead)] + rows)
    cols = sqlite_arrow.int_columns(path, ['"start"', '"end"', "v"], ["s", "e", "v"], "FROM t ORDER BY rowid")
    want_v, want_ok = _via_sql(path, bounds)
    assert sqlite_arrow.within(cols["v"], bounds).to_pylist() == want_v
    ok = sqlite_arrow.span_ok(cols["s"], cols["e"])
    assert (ok.to_pylist() if ok is not None else [True] * len(want_ok)) == want_ok


def test_a_column_typed_real_from_its_first_rows_is_read_again(tmp_path: Path) -> None:
    # 2000 REAL values, then integers: the driver would type the column DOUBLE and turn the integers into floats.
    path = tmp_path / "t.sqlite"
    _table(path, [(0, 1, 0.5)] * 2000 + [(0, 1, 7)])
    cols = sqlite_arrow.int_columns(path, ["v"], ["v"], "FROM t ORDER BY rowid")
    assert cols["v"].type == pa.int64() and cols["v"].to_pylist() == [None] * 2000 + [7]


def test_absent_column_reads_as_int64_nulls(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    _table(path, [(0, 1, 2)] * 3)
    cols = sqlite_arrow.int_columns(path, ["NULL", "v"], ["x", "v"], "FROM t ORDER BY rowid")
    assert cols["x"].type == pa.int64() and cols["x"].to_pylist() == [None] * 3


def test_what_the_driver_cannot_read_is_unreadable(tmp_path: Path) -> None:
    not_sqlite = tmp_path / "x.sqlite"
    not_sqlite.write_bytes(b"not a database at all" * 100)
    with pytest.raises(sqlite_arrow.Unreadable):
        sqlite_arrow.int_columns(not_sqlite, ["1"], ["x"], "FROM sqlite_master")
    missing = tmp_path / "missing.sqlite"
    with pytest.raises(sqlite_arrow.Unreadable):
        sqlite_arrow.int_columns(missing, ["1"], ["x"], "")
    assert not missing.exists()  # read-only: nothing created


def test_dictionary_helpers() -> None:
    ids = pa.array([5, 7, None, 5, 9], pa.int64())
    names = sqlite_arrow.lookup(ids, {5: "a", 7: "b"}, missing="")
    labels = names.dictionary.to_pylist()
    assert names.to_pylist() == ["a", "b", "", "a", ""] and sorted(labels) == ["", "", "a", "b"]
    assert sqlite_arrow.count_codes(pa.array([0, 1, 1, 2], pa.int32()), [1, 2]) == 3
    assert sqlite_arrow.count_codes(pa.array([0, 1], pa.int32()), []) == 0


def test_texts_read_as_sqlite3_reads_them(tmp_path: Path) -> None:
    """`ExportReader.texts` gives what `fetch` gives: text, blobs read as text, NULL for numbers; text that is not
    UTF-8 (the driver would hand its bytes on) sends it to `fetch`, which reads them as U+FFFD."""
    from traceinsight.ingest.base import Ingest
    from traceinsight.ingest.nsys_query import ExportReader
    from traceinsight.ingest.nsys_sqlite import connect

    def texts(rows: list[object]) -> tuple[list[object], list[object]]:
        path = tmp_path / f"t{len(list(tmp_path.iterdir()))}.sqlite"
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE t (x)")  # no affinity: numbers stay numbers
        con.executemany("INSERT INTO t VALUES (?)", [(r,) for r in rows])
        con.commit()
        con.close()
        con = connect(path)
        reader = ExportReader(con, {"t"}, Ingest(format="x"), path)
        expr = nsys_sql.text_sql('"x"')
        try:
            return reader.texts("t", expr, "rowid > 1"), list(reader.fetch("t", [expr], ["x"], "rowid > 1")["x"])
        finally:
            con.close()

    assert texts(["skipped", None, "a", b"bc", 7, 2.5, "é"]) == ([None, "a", "bc", None, None, "é"],) * 2
    assert texts(["skipped", None, None]) == ([None, None],) * 2
    assert texts(["skipped", "ok", b"\xff\xfe"]) == (["ok", "\ufffd\ufffd"],) * 2
    with pytest.raises(sqlite_arrow.Unreadable):
        sqlite_arrow.text_column(tmp_path / "t0.sqlite", "rowid", "FROM t")  # integers: not text
