"""The analysis as tables (report/tables.py) agrees with the JSON document on every shared trace, and
`traceinsight sql` / `export --parquet --analysis` reach them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner
from conftest import TRACES

from traceinsight.cli.main import main
from traceinsight.pipeline import analyze
from traceinsight.report.saved import document_of
from traceinsight.report.tables import ANALYSIS_TABLES, mentions_analysis, write_tables

SHARED = [
    ("h200/flashinfer_decode_sweep.pt.trace.json.gz", "h200/flashinfer_decode_sweep.meta.json.gz"),
    ("h200/flashinfer_fa2_decode_sweep.pt.trace.json.gz", "h200/flashinfer_fa2_decode_sweep.meta.json.gz"),
    ("h200/flashinfer_decode_small.pt.trace.json.gz", None),
    ("h200/flashinfer_decode.sqlite", "h200/flashinfer_decode.nsys.meta.json"),
    ("foreign/tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", None),
    ("foreign/hta_a100_alexnet_critical_path_trace.json.gz", None),
    ("foreign/fuser_h200_report1.sqlite", None),
    ("foreign/pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite", None),
    ("foreign/kineto_tbplugin_v100_resnet50_worker0.1623143089861.pt.trace.json.gz", None),
]


def _rows(db: Any, query: str) -> list[dict[str, Any]]:
    return db.rows(query)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("trace", "meta"), SHARED, ids=[t.split("/")[-1] for t, _ in SHARED])
def test_tables_agree_with_the_json(trace: str, meta: str | None) -> None:
    db, (a,) = analyze([TRACES / trace], meta=[TRACES / meta] if meta else [], cache=False)
    write_tables(db, [a])
    doc = document_of(a)
    steps = _rows(db, "SELECT * FROM steps ORDER BY step")
    assert [(s["step"], s["name"], s["wall_ns"], s["dur_ns"], s["split_kv"], s["phase"], s["attention_ns"])
            for s in steps] == [(s["index"], s["name"], s["wall_ns"], s["dur_ns"], s["split_kv"], s["phase"],
                                 s["attention_ns"]) for s in doc["steps"]]
    parts: dict[int, dict[str, int]] = {}
    for r in _rows(db, "SELECT step, component, ns FROM step_breakdown"):
        parts.setdefault(r["step"], {})[r["component"]] = r["ns"]
    assert parts == {s["index"]: s["breakdown"]["components"] for s in doc["steps"] if s["breakdown"]}
    launches = _rows(db, "SELECT * FROM attention_launches ORDER BY step, start_ns")
    want = [(s["index"], x) for s in doc["steps"] for x in s["launches"]]
    assert [(r["step"], r["kernel"], r["split_kv"], r["phase"], r["dur_ns"], len(r["merge_kernel_ids"]))
            for r in launches] == [(i, x["kernel"], x["split_kv"], x["phase"], x["dur_ns"], len(x["merges"]))
                                   for i, x in want]
    models = {r["kernel_id"]: r["predicted_ns"] for r in _rows(db, "SELECT kernel_id, predicted_ns FROM launch_models")}
    by_id = {r["kernel_id"]: (i, x) for r, (i, x) in zip(launches, want, strict=True)}
    assert {kid: by_id[kid][1]["model"]["predicted_ns"] for kid in models} == models
    assert len(models) == sum(1 for _, x in want if "model" in x)
    found = _rows(db, "SELECT * FROM findings ORDER BY finding")
    assert [(f["rule_id"], f["severity"], f["steps"], f["saving_ns"], json.loads(f["evidence_json"]))
            for f in found] == [(f["id"], f["severity"], f["steps"], f["saving_ns"], f["evidence"])
                                for f in json.loads(json.dumps(doc["findings"]))]
    checks = _rows(db, "SELECT rule_id, status, reason, findings FROM rule_checks")
    assert [(c["rule_id"], c["status"], c["reason"], c["findings"]) for c in checks] == [
        (c["id"], c["status"], c["reason"], c["findings"]) for c in doc["checks"]]


def test_sql_analyzes_when_a_query_names_an_analysis_table(h200: Path) -> None:
    assert mentions_analysis("select * from Findings") and not mentions_analysis("select * from kernels")
    r = CliRunner().invoke(main, ["sql", str(h200 / "flashinfer_decode_sweep.pt.trace.json.gz"),
                                  str(h200 / "flashinfer_decode_sweep.meta.json.gz"),
                                  "select rule_id, count(*) as n from findings join steps on list_contains("
                                  "findings.steps, steps.step) where steps.split_kv = false group by all "
                                  "order by rule_id", "--format", "json"])
    assert r.exit_code == 0, r.stderr
    rows = {x["rule_id"]: x["n"] for x in json.loads(r.stdout)}
    assert rows["split-kv-off"] > 0 and rows["latency-spike"] > 0


def test_export_writes_the_analysis_tables(h200: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    r = CliRunner().invoke(main, ["export", str(h200 / "flashinfer_decode_small.pt.trace.json.gz"), "--parquet",
                                  str(out), "--analysis", "--no-cache"])
    assert r.exit_code == 0, r.stderr
    for name in ANALYSIS_TABLES:
        ((n,),) = duckdb.sql(f"SELECT count(*) FROM read_parquet('{out}/{name}/*/*.parquet')").fetchall()
        assert n > 0, name


@pytest.mark.parametrize("values", [
    [1, None, 3], [True, None, False], [1, 2.5, None], [None, None], ["a", None, "é"], [],
    [[1, 2], None, [], [3]], [[[1, 2], [3, 4]], None, []], [["x"], [], None], [[]], [float("nan"), None, 0.0],
], ids=repr)
def test_python_array_infers_what_pa_array_does(values: list[Any]) -> None:
    import pyarrow as pa

    from traceinsight.ingest.arrow_numpy import python_array

    got, want = python_array(values), pa.array(values)
    assert got.type == want.type and str(got) == str(want)  # str: NaN as NaN


@pytest.mark.parametrize("values", [[1, True], [2**63]], ids=repr)
def test_python_array_hands_what_it_does_not_build_to_pa_array(values: list[Any]) -> None:
    import pyarrow as pa

    from traceinsight.ingest.arrow_numpy import python_array

    with pytest.raises((pa.ArrowTypeError, OverflowError)):
        pa.array(values)
    with pytest.raises((pa.ArrowTypeError, OverflowError)):
        python_array(values)


# What write_tables loads: the analysis cache writes the tables of every analysis it keeps.
_PROBE = """
import sys
from pathlib import Path
from traceinsight.pipeline import analyze
from traceinsight.report.tables import write_tables
db, analyses = analyze([Path(sys.argv[1])], meta=[Path(sys.argv[2])], cache=False)
before = {m.split(".")[0] for m in sys.modules}
write_tables(db, analyses)
print(sorted({m.split(".")[0] for m in sys.modules} - before))
"""


def test_write_tables_loads_no_heavy_module(h200: Path) -> None:
    """No pandas (pyarrow's conversion of Python values) and no matplotlib (the Gantt kept as JSON), with a sidecar
    so that a launch is simulated and its Gantt kept."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _PROBE, str(h200 / "flashinfer_decode_sweep.pt.trace.json.gz"),
                           str(h200 / "flashinfer_decode_sweep.meta.json.gz")], capture_output=True, text=True,
                          check=True)
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1].replace("'", '"')))
    assert not loaded & {"pandas", "matplotlib", "scipy"}, sorted(loaded)


@pytest.mark.parametrize(("fmt", "traces"), [("json", 2), ("text", 1)])
def test_a_keeping_run_writes_each_table_once(fmt: str, traces: int, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that keeps its analysis (cli/analysis_cache.py) builds each trace's tables once, into the kept entry,
    and the report is read from them there (report/saved.py); it writes what a run keeping nothing writes."""
    from traceinsight.report import tables

    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRACEINSIGHT_CACHE_MIN_BYTES", "0")
    built: list[str] = []
    real = tables.BUILDERS["analyses"]
    monkeypatch.setitem(tables.BUILDERS, "analyses", lambda a, c: built.append(a.path) or real(a, c))
    paths = [TRACES / "h200/flashinfer_decode_small.pt.trace.json.gz", TRACES / "h200/flashinfer_decode.sqlite"]
    args = ["analyze", *map(str, paths[:traces]), "--format", fmt]
    alone = CliRunner().invoke(main, [*args, "--no-cache"])
    CliRunner().invoke(main, args)  # a marker
    built.clear()
    keeping = CliRunner().invoke(main, args)  # analyzed again, and kept
    assert (keeping.exit_code, keeping.stdout, keeping.stderr) == (alone.exit_code, alone.stdout, alone.stderr)
    assert len(built) == traces and len(set(built)) == traces
    assert list((tmp_path / "cache" / "analysis").glob("*.duckdb"))


def test_the_document_follows_a_changed_analysis() -> None:
    """The document of an analysis is read from tables written from it as it is now: a part of the analysis
    replaced or grown shows."""
    _, (a,) = analyze([TRACES / "h200/flashinfer_decode_small.pt.trace.json.gz"], cache=False)
    first = document_of(a)
    assert first["findings"] and document_of(a) == first
    a.findings = a.findings[1:]
    assert document_of(a)["findings"] == first["findings"][1:]
    a.extra["note"] = 1
    assert document_of(a)["note"] == 1
    a.steps = a.steps[:3]
    assert document_of(a)["step_summary"]["count"] == 3 and len(document_of(a)["steps"]) == 3
    assert document_of(a, "selected")["steps_included"] == "selected"


@pytest.mark.parametrize("slice_rows", [2, 3, 10**6])
def test_long_tables_are_written_in_compressed_slices(monkeypatch: pytest.MonkeyPatch, slice_rows: int) -> None:
    """In the analysis's compressed in-memory database, when memory is short, a long table goes in slices, each
    compressed (checkpointed) before the next: the rows are those of one whole insert into a plain database, in the
    same order, whether the tables are built in slices smaller than a checkpoint's, of its size, or whole."""
    import traceinsight.report.tables as tables
    from traceinsight.ingest.schema import analysis_schema_sql

    db, (a,) = analyze([TRACES / "h200/flashinfer_decode_small.pt.trace.json.gz"], cache=False)
    plain = duckdb.connect()
    plain.execute(analysis_schema_sql())
    tables.write_tables_on(plain, [a])
    monkeypatch.setattr(tables, "CHECKPOINT_MIN_ROWS", 2)
    monkeypatch.setattr(tables, "CHECKPOINT_ROWS", 3)  # several slices, the last one short
    monkeypatch.setattr(tables, "SLICE_ROWS", slice_rows)
    monkeypatch.setattr(tables, "UNCOMPRESSED_ROW_BYTES", 1 << 40)  # as when memory is short (`_short_of_memory`)
    write_tables(db, [a])
    for name in ANALYSIS_TABLES:
        assert db.con.execute(f"SELECT * FROM {name}").fetchall() == plain.execute(f"SELECT * FROM {name}").fetchall()
    assert db.con.execute("SELECT count(*) FROM steps").fetchone()[0] > 3  # type: ignore[index]
    persistent = {p for (p,) in db.con.execute("SELECT DISTINCT persistent FROM pragma_storage_info('steps')")
                  .fetchall()}
    assert persistent == {True}  # compressed: none left as inserted
    assert {p for (p,) in plain.execute("SELECT DISTINCT persistent FROM pragma_storage_info('steps')")
            .fetchall()} == {False}


def test_tables_are_compressed_only_when_memory_is_short() -> None:
    """Checkpoints cost time (0.6 CPU-s at 1M kernels): the analysis's in-memory tables are compressed as they go
    in only when, as inserted, they would take a large share of what DuckDB's limit leaves."""
    import traceinsight.report.tables as tables

    db, (a,) = analyze([TRACES / "h200/flashinfer_decode_small.pt.trace.json.gz"], cache=False)
    db.con.execute("SET memory_limit = '64GB'")
    assert not tables._short_of_memory(db.con, 10**4)  # 12 MB as inserted
    assert tables._short_of_memory(db.con, 10**8)  # 120 GB
    db.con.execute("SET memory_limit = '16MB'")
    assert tables._short_of_memory(db.con, 10**4)
    db.con.execute("SET memory_limit = '64GB'")
    write_tables(db, [a])
    assert db.con.sql("SELECT count(*) FROM steps").fetchall() == [(len(a.steps),)]  # no unfinished result left
    persistent = {p for (p,) in db.con.execute("SELECT DISTINCT persistent FROM pragma_storage_info('steps')")
                  .fetchall()}
    assert persistent == {False}  # left as inserted: memory is not short
