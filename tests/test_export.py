"""`traceinsight export PATH... --parquet DIR` and the path expansion behind it, on the real traces.

Row counts were checked independently: the sweep trace has 1074 kernels, 911 memcpy/memset, 1985 launches and
780 ranges (see tests/test_kineto.py: json + Decimal); the nsys export has 70 kernels (`sqlite3
flashinfer_decode.sqlite "select count(*) from CUPTI_ACTIVITY_KIND_KERNEL"`). The Parquet files are read back
with DuckDB alone, not through traceinsight.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from traceinsight.cli.main import main
from traceinsight.errors import InputError
from traceinsight.ingest.paths import expand_paths

SWEEP = "flashinfer_decode_sweep.pt.trace.json.gz"
SMALL = "flashinfer_decode_small.pt.trace.json.gz"
NSYS = "flashinfer_decode.sqlite"
TABLES = {"traces", "devices", "kernels", "launches", "graph_replays", "ranges", "host_ops", "collectives", "memops",
          "ncu_kernels", "ncu_metrics", "batches", "kernel_labels"}


@pytest.fixture(autouse=True)
def no_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(tmp_path / "cache"))


def export(*args: str) -> str:
    result = CliRunner().invoke(main, ["export", *args])
    assert result.exit_code == 0, result.output
    return result.output


def dataset(out: Path, table: str) -> str:
    return f"read_parquet('{out}/{table}/*/*.parquet', hive_partitioning = true)"


def test_export_two_traces(h200: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    text = export(str(h200 / SWEEP), str(h200 / NSYS), "--parquet", str(out))
    assert "flashinfer_decode_sweep\t1074 kernels" in text and "flashinfer_decode\t70 kernels" in text

    for table in TABLES:  # one partition per trace and table
        assert sorted(p.name for p in (out / table).iterdir()) == [
            "trace=flashinfer_decode", "trace=flashinfer_decode_sweep"], table
        for part in (out / table).iterdir():
            assert [f.name for f in part.iterdir()] == ["part-0.parquet"]

    con = duckdb.connect()
    counts = dict(con.execute(f"SELECT trace, count(*) FROM {dataset(out, 'kernels')} GROUP BY ALL").fetchall())
    assert counts == {"flashinfer_decode_sweep": 1074, "flashinfer_decode": 70}
    sweep = {t: con.execute(f"SELECT count(*) FROM {dataset(out, t)} WHERE trace = 'flashinfer_decode_sweep'")
             .fetchone()[0] for t in ("memops", "launches", "ranges", "devices", "traces")}
    assert sweep == {"memops": 911, "launches": 1985, "ranges": 780, "devices": 1, "traces": 1}
    assert con.execute(f"SELECT sum(dur_ns) FROM {dataset(out, 'kernels')} WHERE trace = 'flashinfer_decode_sweep'"
                       ).fetchone()[0] == 1_318_666_032
    # the per-database trace_id is left out; kernel ids run 0.. within each trace
    cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {dataset(out, 'kernels')}").fetchall()]
    assert "trace_id" not in cols and "trace" in cols
    ids = con.execute(f"SELECT trace, min(kernel_id), max(kernel_id) FROM {dataset(out, 'kernels')} GROUP BY ALL "
                      "ORDER BY 1").fetchall()
    assert ids == [("flashinfer_decode", 0, 69), ("flashinfer_decode_sweep", 0, 1073)]
    # each file lies in id order (kernels and ranges are written as the store keeps them, unsorted)
    for table, column in (("kernels", "kernel_id"), ("ranges", "range_id"), ("launches", "start_ns")):
        for part in (out / table).iterdir():
            values = [r[0] for r in con.execute(f"SELECT {column} FROM '{part}/part-0.parquet'").fetchall()]
            assert values == sorted(values) and len(values) > 0, (table, part.name)
    # labels join within a trace: the decode kernels of both traces
    decode = con.execute(
        f"SELECT k.trace, count(*) FROM {dataset(out, 'kernels')} k JOIN {dataset(out, 'kernel_labels')} l "
        "USING (trace, name) WHERE contains(k.name, 'BatchDecodeWithPagedKVCacheKernel') GROUP BY ALL ORDER BY 1"
    ).fetchall()
    assert decode[1] == ("flashinfer_decode_sweep", 260)

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["schema"] == "traceinsight.parquet/1" and set(manifest["tables"]) == TABLES
    assert set(manifest["versions"]) >= {"traceinsight", "duckdb", "pyarrow", "schema_sql_sha256"}
    by_key = {t["trace"]: t for t in manifest["traces"]}
    assert by_key["flashinfer_decode_sweep"]["rows"]["kernels"] == 1074
    assert by_key["flashinfer_decode"]["format"] == "nsys-sqlite"
    assert by_key["flashinfer_decode"]["path"] == str((h200 / NSYS).resolve())


def test_export_adds_and_replaces(h200: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    export(str(h200 / NSYS), "--parquet", str(out))
    export(str(h200 / SMALL), "--parquet", str(out))
    export(str(h200 / NSYS), "--parquet", str(out))  # again: replaced, not duplicated
    con = duckdb.connect()
    counts = dict(con.execute(f"SELECT trace, count(*) FROM {dataset(out, 'kernels')} GROUP BY ALL").fetchall())
    assert counts == {"flashinfer_decode": 70, "flashinfer_decode_small": 48}
    manifest = json.loads((out / "manifest.json").read_text())
    assert [t["trace"] for t in manifest["traces"]] == ["flashinfer_decode", "flashinfer_decode_small"]
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_same_file_names_get_distinct_keys(h200: Path, tmp_path: Path) -> None:
    a = tmp_path / "a" / SMALL
    b = tmp_path / "b" / SMALL
    for p in (a, b):
        p.parent.mkdir()
        shutil.copy(h200 / SMALL, p)
    out = tmp_path / "ds"
    export(str(tmp_path / "a"), str(b), "--parquet", str(out), "--format", "json")
    keys = sorted(p.name for p in (out / "kernels").iterdir())
    assert keys[0] == "trace=flashinfer_decode_small" and keys[1].startswith("trace=flashinfer_decode_small-")
    con = duckdb.connect()
    assert con.execute(f"SELECT count(*) FROM {dataset(out, 'kernels')}").fetchone()[0] == 96


def test_expand_paths(h200: Path, foreign: Path, tmp_path: Path) -> None:
    # a folder: traces only (sidecars and ncu CSVs are companions), sorted, the .nsys-rep replaced by its export
    fa2 = "flashinfer_fa2_decode_sweep.pt.trace.json.gz"
    assert [p.name for p in expand_paths([h200])] == [NSYS, SMALL, SWEEP, fa2]
    got = expand_paths([f"{foreign}/*.sqlite", str(foreign / "fuser_h200_report1.sqlite")])
    assert [p.name for p in got] == ["fuser_h200_report1.sqlite", "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"]
    assert expand_paths([str(h200 / SWEEP)]) == [h200 / SWEEP]
    assert expand_paths([tmp_path / "missing.json"]) == [tmp_path / "missing.json"]  # the reader reports it
    with pytest.raises(InputError, match="no trace files"):
        expand_paths([tmp_path])
    with pytest.raises(InputError, match="no trace files match"):
        expand_paths([f"{tmp_path}/*.json"])
