"""`traceinsight report SAVED`: a trace analyzed once (`analyze --save DIR`, `export --parquet --analysis`, a
`fleet analyze` folder, a DuckDB database with the analysis tables) renders again from its saved tables alone,
the same bytes `analyze` wrote: text, JSON, Markdown and HTML, one trace or several. Bad SAVED inputs are one
line and exit 2. (tests/test_golden.py holds the rebuilt document equal on every golden case.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import TRACES

from traceinsight.cli.main import main

REPO = Path(__file__).resolve().parents[1]
SWEEP = TRACES / "h200/flashinfer_decode_sweep.pt.trace.json.gz"
SWEEP_META = TRACES / "h200/flashinfer_decode_sweep.meta.json.gz"
SMALL = TRACES / "h200/flashinfer_decode_small.pt.trace.json.gz"
NSYS = TRACES / "h200/flashinfer_decode.sqlite"
NSYS_META = TRACES / "h200/flashinfer_decode.nsys.meta.json"
NSYS_NCU = TRACES / "h200/flashinfer_decode.ncu.csv"


@pytest.fixture(autouse=True)
def own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(tmp_path / "cache"))


def cli(*args: str | Path, code: int = 0) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result.output


def read(p: Path) -> bytes:
    return p.read_bytes()


@pytest.fixture(scope="module")
def nsys_saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """The shared nsys export with its sidecar and Nsight Compute CSV (models, measured SM idle), analyzed once
    with --save, and what `analyze` wrote in each format."""
    d = tmp_path_factory.mktemp("nsys")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRACEINSIGHT_CACHE_DIR", str(d / "cache"))
        inputs = [NSYS, "--meta", NSYS_META, "--ncu", NSYS_NCU]
        cli("analyze", *inputs, "--save", d / "saved", "--out", d / "a.txt")
        out = {"txt": read(d / "a.txt")}
        for fmt, ext in (("json", "json"), ("html", "html"), ("md", "md")):
            cli("analyze", *inputs, "--format", fmt, "--out", d / f"a.{ext}")
            out[ext] = read(d / f"a.{ext}")
        cli("analyze", *inputs, "--format", "json", "--steps", "all", "--out", d / "all.json")
        out["all.json"] = read(d / "all.json")
    return d, out


def test_report_renders_what_analyze_wrote(nsys_saved: tuple[Path, dict[str, bytes]], tmp_path: Path) -> None:
    d, want = nsys_saved
    saved = d / "saved"
    cli("report", saved, "--out", tmp_path / "b.txt")
    assert read(tmp_path / "b.txt") == want["txt"]
    for fmt, ext in (("json", "json"), ("html", "html")):
        cli("report", saved, "--format", fmt, "--out", tmp_path / f"b.{ext}")
        assert read(tmp_path / f"b.{ext}") == want[ext], fmt
    cli("report", saved, "--format", "json", "--steps", "all", "--out", tmp_path / "all.json")
    assert read(tmp_path / "all.json") == want["all.json"]
    doc = json.loads(want["all.json"])
    launches = [x for s in doc["steps"] for x in s["launches"]]
    assert any("measured" in x for x in launches) and any("model" in x for x in launches)  # both paths exercised
    # Markdown: the same text, its figures written beside it under the same names
    cli("report", saved, "--format", "md", "--out", tmp_path / "a.md")
    assert read(tmp_path / "a.md") == want["md"]
    assert sorted(p.name for p in (tmp_path / "a_figs").iterdir()) == sorted(p.name for p in (d / "a_figs").iterdir())


def test_report_text_on_stdout_and_fail_on(nsys_saved: tuple[Path, dict[str, bytes]]) -> None:
    d, want = nsys_saved
    text = cli("report", d / "saved", "--width", "120", "--max-steps", "5")
    assert "split" in text.lower() and "steps" in text
    severities = {f["severity"] for f in json.loads(want["json"])["findings"]}
    assert severities, "the nsys trace has findings"
    worst = "critical" if "critical" in severities else "warning" if "warning" in severities else "info"
    cli("report", d / "saved", "--format", "json", "--fail-on", worst, code=3)


def test_several_traces_and_trace_selection(tmp_path: Path) -> None:
    # a dataset's traces come in the order of their keys (the file names): small before sweep
    cli("analyze", SMALL, SWEEP, "--save", tmp_path / "saved", "--format", "json", "--out", tmp_path / "a.json")
    cli("analyze", SMALL, SWEEP, "--out", tmp_path / "a.txt")
    cli("report", tmp_path / "saved", "--format", "json", "--out", tmp_path / "b.json")
    assert read(tmp_path / "b.json") == read(tmp_path / "a.json")
    cli("report", tmp_path / "saved", "--out", tmp_path / "b.txt")
    assert read(tmp_path / "b.txt") == read(tmp_path / "a.txt")
    # one trace, by its file name or its key in the dataset: that trace's document
    cli("analyze", SMALL, "--format", "json", "--out", tmp_path / "small.json")
    for name in (SMALL.name, "flashinfer_decode_small"):
        cli("report", tmp_path / "saved", "--trace", name, "--format", "json", "--out", tmp_path / "c.json")
        assert read(tmp_path / "c.json") == read(tmp_path / "small.json"), name
    out = cli("report", tmp_path / "saved", "--trace", "nope", code=2)
    assert out.count("\n") == 1 and "no saved analysis for nope" in out


def test_fleet_folder_and_duckdb_database(tmp_path: Path) -> None:
    """A `fleet analyze` folder (the trace with the sidecar beside it) and a DuckDB database holding the tables."""
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(SWEEP, src / SWEEP.name)
    shutil.copy(SWEEP_META, src / "flashinfer_decode_sweep.sidecar.json.gz")
    cli("fleet", "analyze", src, "--out", tmp_path / "fleet", "--workers", "1")
    cli("analyze", src / SWEEP.name, "--meta", src / "flashinfer_decode_sweep.sidecar.json.gz",
        "--format", "json", "--out", tmp_path / "a.json")
    cli("report", tmp_path / "fleet", "--format", "json", "--out", tmp_path / "b.json")
    assert read(tmp_path / "b.json") == read(tmp_path / "a.json")

    from traceinsight.ingest.store import TraceDB
    from traceinsight.pipeline import analyze
    from traceinsight.report.tables import write_tables

    db_path = tmp_path / "analysis.duckdb"
    db, analyses = analyze([SMALL], db=TraceDB(db_path), cache=False)
    write_tables(db, analyses)
    db.con.close()
    cli("analyze", SMALL, "--format", "json", "--out", tmp_path / "small.json")
    cli("report", db_path, "--format", "json", "--out", tmp_path / "db.json")
    assert read(tmp_path / "db.json") == read(tmp_path / "small.json")


def _one_line_error(args: list[str]) -> str:
    """The CLI in its own process: exit 2, one line on stderr, no traceback."""
    r = subprocess.run([sys.executable, "-m", "traceinsight", *args], capture_output=True, text=True, timeout=120,
                       cwd=REPO)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    return r.stderr


def test_bad_saved_inputs(tmp_path: Path) -> None:
    assert "no such file" in _one_line_error(["report", str(tmp_path / "missing")])
    (tmp_path / "empty").mkdir()
    assert "not a traceinsight dataset" in _one_line_error(["report", str(tmp_path / "empty")])
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text('{"schema": "something/1"}')
    assert "not a traceinsight dataset" in _one_line_error(["report", str(tmp_path / "other")])
    cli("export", SMALL, "--parquet", tmp_path / "plain")  # the normalized tables only, no analysis
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "plain").rglob("*")}
    assert "no saved analysis" in _one_line_error(["report", str(tmp_path / "plain")])
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "plain").rglob("*")} == before  # nothing written
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"not a database at all" * 100)
    assert "not a DuckDB database" in _one_line_error(["report", str(junk)])
    assert junk.read_bytes() == b"not a database at all" * 100


def _but_sampled_kernels(text: str) -> dict:  # type: ignore[type-arg]
    """A diff document without what only traces give: the gate's non-attention kernel groups (GEMM, merge, ...
    are sampled from the trace's kernels; saved analyses keep the attention launches of their steps alone)."""
    d = json.loads(text)
    g = d["gate"]
    g["kernel_groups"] = [k for k in g["kernel_groups"] if k["family"] == "attention"]
    for key in ("notes", "noise_floor", "summary", "regressed", "improved"):
        g.pop(key)
    return d  # type: ignore[no-any-return]


def test_diff_reads_saved_folders(tmp_path: Path) -> None:
    """`diff` of two saved analyses says what `diff` of the two traces says."""
    cli("analyze", SMALL, "--save", tmp_path / "small", "--format", "json", "--steps", "all",
        "--out", tmp_path / "s.json")
    cli("analyze", SWEEP, "--save", tmp_path / "sweep", "--format", "json", "--out", tmp_path / "w.json")
    want = _but_sampled_kernels(cli("diff", SMALL, SWEEP, "--format", "json"))
    assert _but_sampled_kernels(cli("diff", tmp_path / "small", tmp_path / "sweep", "--format", "json")) == want
    # every step: the same
    assert _but_sampled_kernels(cli("diff", tmp_path / "s.json", tmp_path / "sweep", "--format", "json")) == want
    cli("analyze", SMALL, SWEEP, "--save", tmp_path / "both", "--format", "json", "--out", tmp_path / "b.json")
    out = cli("diff", tmp_path / "both", tmp_path / "sweep", code=2)
    assert "holds 2 saved analyses" in out and out.count("\n") == 1
