"""The analysis cache (cli/analysis_cache.py): `analyze` run again on unchanged inputs with the same options writes
the same bytes — stdout, stderr, output files, exit status — from the analysis tables it kept (the second run
keeps them, the first leaves a marker), without analyzing; anything that may change the analysis misses; a damaged
entry is analyzed again; --no-cache and small traces keep nothing."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import TRACES

from traceinsight.cli import analysis_cache
from traceinsight.cli.main import main

REPO = Path(__file__).resolve().parents[1]
SMALL = TRACES / "h200/flashinfer_decode_small.pt.trace.json.gz"
SWEEP = TRACES / "h200/flashinfer_decode_sweep.pt.trace.json.gz"
# Given twice with the small trace: read once, which the analysis warns of (a warning on stderr).
SWEEP_META = TRACES / "h200/flashinfer_decode_sweep.meta.json.gz"
NSYS = TRACES / "h200/flashinfer_decode.sqlite"
NSYS_META = TRACES / "h200/flashinfer_decode.nsys.meta.json"
NSYS_NCU = TRACES / "h200/flashinfer_decode.ncu.csv"


@pytest.fixture(autouse=True)
def cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRACEINSIGHT_CACHE_MIN_BYTES", "0")  # the real traces are small: keep them anyway
    return tmp_path / "cache"


def kept(cache_dir: Path) -> list[Path]:
    folder = cache_dir / "analysis"
    return sorted(p for p in folder.iterdir() if p.suffix == ".duckdb") if folder.is_dir() else []


def run(*args: str | Path) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["analyze", *map(str, args)])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.stdout, r.stderr


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


TEXT, WIDE, JSON, ALL = (), ("--max-steps", "0", "--width", "100"), ("--format", "json"), ("--format", "json",
                                                                                          "--steps", "all")
FAIL, TEXT_FILE = ("--fail-on", "info"), ("--out", "OUT/r.txt")
HTML, MD = ("--format", "html", "--out", "OUT/r.html"), ("--format", "md", "--out", "OUT/r.md")


@pytest.mark.parametrize(("inputs", "variants"), [
    pytest.param((SMALL, "--meta", SWEEP_META, "--meta", SWEEP_META), (TEXT, WIDE, JSON, ALL, FAIL, TEXT_FILE, MD),
                 id="kineto-with-a-warning"),
    pytest.param((NSYS, "--meta", NSYS_META, "--ncu", NSYS_NCU), (TEXT, ALL, HTML), id="nsys-sidecar-ncu"),
    pytest.param((SMALL, SWEEP), (TEXT, JSON, FAIL, HTML), id="two-traces"),
])
def test_a_second_analyze_writes_the_same_bytes(inputs: tuple[str | Path, ...], variants: tuple[tuple[str, ...], ...],
                                               cache_dir: Path, tmp_path: Path) -> None:
    """Each output variant from the kept analysis equals the analysis's own (--no-cache): stdout, stderr, exit
    status and every file written."""

    def analyze(opts: tuple[str, ...], *extra: str) -> tuple[tuple[int, str, str], dict[str, bytes]]:
        out = tmp_path / "out"
        out.mkdir()
        try:
            return run(*inputs, *(o.replace("OUT", str(out)) for o in opts), *extra), files(out)
        finally:
            shutil.rmtree(out)

    analyze(TEXT)  # analyzed: a marker only
    assert kept(cache_dir) == []
    last = variants[-1]
    keeping = analyze(last)  # analyzed again, and kept: its report read from the entry's tables as they are written
    assert len(kept(cache_dir)) == 1
    assert keeping == analyze(last, "--no-cache")
    for opts in variants:
        assert analyze(opts) == analyze(opts, "--no-cache"), opts
    assert len(kept(cache_dir)) == 1  # one entry whatever the format: the tables, not a report
    if inputs.count(SWEEP_META) == 2:
        assert "given twice" in analyze(JSON)[0][2]  # the analysis's warning, from the kept tables too


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_hit_does_not_analyze(fmt: str, tmp_path: Path, cache_dir: Path) -> None:
    """In a fresh process, a kept analysis renders without importing the pipeline, the rules, the reader or the
    model, nor numpy and pyarrow, which only the analysis needs (0.2 s of a 0.3 s repeat run)."""
    probe = tmp_path / "modules.txt"
    code = ("import sys\nfrom traceinsight.cli.main import main\n"
            f"try:\n    main(['analyze', {str(SWEEP)!r}, '--format', {fmt!r}])\nexcept SystemExit:\n    pass\n"
            f"open({str(probe)!r}, 'w').write('\\n'.join(sorted(sys.modules)))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    loaded = []
    for _ in range(3):  # analyzed; analyzed and kept; rendered from the kept tables
        subprocess.run([sys.executable, "-c", code], check=True, env=env, stdout=subprocess.DEVNULL)
        loaded.append(set(probe.read_text().split()))
    del loaded[0]
    analysis = {"traceinsight.pipeline", "traceinsight.diagnose.registry", "traceinsight.model", "numpy", "pyarrow"}
    assert analysis <= loaded[0]  # (the trace itself came from the ingest cache)
    assert not (analysis | {"traceinsight.ingest.kineto"}) & loaded[1], (analysis & loaded[1])


def test_what_may_change_the_analysis_misses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / SMALL.name
    shutil.copy(SMALL, trace)

    def key(*, meta: tuple[Path, ...] = (), pattern: str | None = None) -> Path | None:
        return analysis_cache.entry_path([trace], list(meta), [], pattern, None)

    base = key()
    assert base is not None and base.parent.name == "analysis"
    assert key() == base
    assert key(meta=(SWEEP_META,)) != base
    assert key(pattern="^step") != base
    monkeypatch.setenv("TRACEINSIGHT_MEMORY_LIMIT", "2GB")  # memory and threads do not change a result
    monkeypatch.setenv("TRACEINSIGHT_WORKERS", "1")
    monkeypatch.setenv("TRACEINSIGHT_DASHBOARD_PATHS", str(trace))  # the dashboard looks its traces up with it set
    assert key() == base
    monkeypatch.setenv("TRACEINSIGHT_MAX_DECOMPRESSED_BYTES", "1000")  # a limit may cut the file
    assert key() != base
    monkeypatch.delenv("TRACEINSIGHT_MAX_DECOMPRESSED_BYTES")
    rules = tmp_path / "rules.toml"
    rules.write_text("")
    monkeypatch.setenv("TRACEINSIGHT_RULES", str(rules))
    with_rules = key()
    assert with_rules != base
    os.utime(rules, ns=(1, 1))  # the rules file changed
    assert key() != with_rules
    monkeypatch.delenv("TRACEINSIGHT_RULES")
    os.utime(trace, ns=(2, 2))  # the trace changed
    assert key() != base
    moved = tmp_path / "elsewhere.pt.trace.json.gz"
    shutil.copy(SMALL, moved)
    assert analysis_cache.entry_path([moved], [], [], None, None) != base
    assert analysis_cache.entry_path([tmp_path / "missing.json"], [], [], None, None) is None


def test_a_damaged_entry_is_analyzed_again(cache_dir: Path) -> None:
    first = run(SMALL)
    assert run(SMALL) == first
    (entry,) = kept(cache_dir)
    entry.write_bytes(b"not a database")
    assert run(SMALL) == first
    (again,) = kept(cache_dir)
    assert again == entry and again.stat().st_size > 1000
    assert run(SMALL) == first


def test_no_cache_and_small_traces_keep_nothing(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run(SMALL, "--no-cache")
    assert kept(cache_dir) == []
    monkeypatch.setenv("TRACEINSIGHT_CACHE", "0")
    run(SMALL)
    assert kept(cache_dir) == []
    monkeypatch.delenv("TRACEINSIGHT_CACHE")
    monkeypatch.setenv("TRACEINSIGHT_CACHE_MIN_BYTES", str(SMALL.stat().st_size + 1))
    run(SMALL)
    assert kept(cache_dir) == []
    monkeypatch.setenv("TRACEINSIGHT_CACHE_MIN_BYTES", "0")
    monkeypatch.setenv("TRACEINSIGHT_ANALYSIS_CACHE", "0")  # this cache alone off
    run(SMALL)
    assert kept(cache_dir) == []
    monkeypatch.delenv("TRACEINSIGHT_ANALYSIS_CACHE")
    for _ in range(2):
        run(SMALL, "--format", "perfetto", "--out", str(cache_dir.parent / "t.json"))  # it needs the trace itself
    assert len(kept(cache_dir)) == 1


# `traceinsight sql` on the analysis tables: answered from the kept analysis (the first six), or by analyzing the
# traces when the query reads a trace table or its tables cannot be told (the rest). Row order is pinned by ORDER BY.
KEPT_QUERIES = (
    "select count(*) n, sum(wall_ns) wall, min(step), max(step) from steps",
    "select trace_id, finding, rule_id, severity, steps, saving_ns, evidence_json from findings order by all",
    "select trace_id, path, format, warnings, summary_json from analyses order by trace_id",
    "with s as (select * from steps where wall_ns > 0) select s.trace_id, s.step, l.launch, l.kernel, m.predicted_ns "
    "from s join attention_launches l using (trace_id, step) left join launch_models m using (trace_id, kernel_id) "
    "order by all limit 40",
    "select rule_id, status, count(*) from rule_checks group by all order by all",
    "with kernels as (select 1 x) select count(*) from steps, (select count(*) from kernels)",  # the CTE's name
)
TRACE_QUERIES = (
    "select a.trace_id, count(*), sum(k.dur_ns) from kernels k join attention_launches a using (trace_id, kernel_id) "
    "group by all order by all",
    # `kernels` in the first subquery is the trace table, in the second the CTE: the kept tables' catalog error
    "select (select count(*) from kernels), (with kernels as (select 1 x) select count(*) from kernels), count(*) "
    "from steps",
    "describe findings",
    "select table_name from information_schema.tables where table_name in ('steps', 'kernels') order by all",
)


def sql(*args: str | Path) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["sql", *map(str, args), "--format", "csv"])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize("inputs", [pytest.param((SMALL, SWEEP), id="two-traces"),
                                    pytest.param((SMALL, SWEEP_META), id="trace-and-sidecar-as-a-trace"),
                                    pytest.param((SMALL, "--meta", SWEEP_META), id="trace-with-its-sidecar")])
def test_sql_answers_from_the_kept_analysis(inputs: tuple[str | Path, ...], cache_dir: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`sql PATHS QUERY` answers as the analyzed traces do whether `analyze PATHS` kept its analysis or not; a
    query reading only the analysis tables does not analyze when it did, one reading a trace table does."""
    cli = importlib.import_module("traceinsight.cli.sql")  # the module (its `command` is the command)

    monkeypatch.setenv("TRACEINSIGHT_ANALYSIS_CACHE", "0")
    analyzed = {q: sql(*inputs, q) for q in KEPT_QUERIES + TRACE_QUERIES + ("select nope from steps",)}
    assert all(code == 0 and out for code, out, _ in list(analyzed.values())[:-1])
    assert analyzed["select nope from steps"][0] == 2  # the user's SQL error, one line
    assert kept(cache_dir) == []
    monkeypatch.delenv("TRACEINSIGHT_ANALYSIS_CACHE")
    run(*inputs)
    run(*inputs)  # analyzed again: kept
    assert len(kept(cache_dir)) == 1
    calls: list[str] = []
    real = cli._sql_analyzed
    monkeypatch.setattr(cli, "_sql_analyzed", lambda traces, meta, ncu, query, entry: calls.append(query) or real(
        traces, meta, ncu, query, entry))
    for q, expected in analyzed.items():
        assert sql(*inputs, q) == expected, q
    assert calls == list(TRACE_QUERIES)  # the kept analysis answered the rest, the SQL error included


def test_sql_keeps_its_analysis_for_analyze(cache_dir: Path) -> None:
    """Two `sql` runs on the analysis tables keep the analysis `analyze PATHS` then renders (the same bytes)."""
    query = "select count(*) from findings"
    first = sql(SMALL, query)
    assert kept(cache_dir) == []
    assert sql(SMALL, query) == first
    assert len(kept(cache_dir)) == 1
    assert run(SMALL, "--format", "json") == run(SMALL, "--format", "json", "--no-cache")


def test_tables_read() -> None:
    from traceinsight.ingest.safe_sql import tables_read

    assert tables_read("select * from Steps join main.findings using (trace_id)") == {"steps", "findings"}
    assert tables_read("with x as (select * from steps) select (select count(*) from kernels) from x "
                       "union all select 1 from rule_checks order by 1") == {"steps", "kernels", "rule_checks"}
    assert tables_read("select * from (values (1)) v(x)") == frozenset()
    for unknown in ("describe steps", "show tables", "summarize steps", "explain select * from steps",
                    "pragma show_tables", "select * from duckdb_tables()", "select * from steps, unnest([1])",
                    "select * from information_schema.tables", "select * from other.main.steps", "not sql"):
        assert tables_read(unknown) is None, unknown


def test_every_spelling_of_a_trace_shares_its_entry(cache_dir: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace named by another path (relative, through `..`, a link to it) is the same analysis, the same bytes:
    `analyze` and `sql` answer from the entry kept under any spelling, without analyzing."""
    pipeline = importlib.import_module("traceinsight.pipeline")
    cli = importlib.import_module("traceinsight.cli.sql")
    link = tmp_path / "link.pt.trace.json.gz"
    link.symlink_to(SMALL)
    monkeypatch.chdir(SMALL.parent)
    spellings = (SMALL, Path(SMALL.name), Path(".") / ".." / SMALL.parent.name / SMALL.name, link)
    query = "select trace_id, path, format, summary_json from analyses"
    expected = run(SMALL, "--format", "json", "--meta", SWEEP_META, "--no-cache")
    expected_sql = sql(SMALL, "--meta", SWEEP_META, query)
    run(SMALL, "--meta", SWEEP_META)
    run(SMALL, "--meta", SWEEP_META)  # analyzed again: kept
    assert len(kept(cache_dir)) == 1

    def no_analysis(*args: object, **kwargs: object) -> None:
        raise AssertionError("analyzed")

    monkeypatch.setattr(pipeline, "analyze", no_analysis)
    monkeypatch.setattr(cli, "_sql_analyzed", no_analysis)
    for trace in spellings:
        assert run(trace, "--format", "json", "--meta", SWEEP_META) == expected, trace
        assert sql(trace, "--meta", SWEEP_META, query) == expected_sql, trace
    assert len(kept(cache_dir)) == 1


def test_a_sidecar_among_the_paths_is_another_analysis(cache_dir: Path) -> None:
    """`analyze TRACE SIDECAR` (and `sql TRACE SIDECAR`) read the sidecar as a trace of its own, and say so;
    `analyze TRACE --meta SIDECAR` (and `sql TRACE --meta SIDECAR`) attach it to the trace: two analyses, two
    entries, neither answering for the other."""
    query = "select count(*) from analyses"
    code, out, err = sql(SMALL, SWEEP_META, query)
    assert out == "count_star()\n2\n"  # the trace, and the sidecar as a trace
    code, out, err = run(SMALL, SWEEP_META, "--no-cache")
    assert code == 0 and f"give it with --meta beside the trace it describes (traceinsight analyze TRACE --meta " \
        f"{SWEEP_META.name})" in err
    assert sql(SMALL, "--meta", SWEEP_META, "select source, count(*) from launch_models group by all")[1] == \
        "source,count_star()\nsidecar,18\n"
    for _ in range(2):
        run(SMALL, "--meta", SWEEP_META)
    (with_meta,) = kept(cache_dir)
    assert sql(SMALL, SWEEP_META, query)[1] == "count_star()\n2\n"  # not the kept `--meta` analysis's 1
    assert sql(SMALL, SWEEP_META, query)[1] == "count_star()\n2\n"
    assert len(kept(cache_dir)) == 2
    assert run(SMALL, "--meta", SWEEP_META, "--format", "json") == run(SMALL, "--meta", SWEEP_META, "--format",
                                                                       "json", "--no-cache")
    assert run(SMALL, SWEEP_META, "--format", "json") == run(SMALL, SWEEP_META, "--format", "json", "--no-cache")
    assert with_meta in kept(cache_dir)
    assert sql(SMALL, "--meta", SWEEP_META, query)[1] == "count_star()\n1\n"  # `analyze --meta`'s entry answers


def test_large_inputs_are_kept_at_their_first_analysis(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs of $TRACEINSIGHT_ANALYSIS_KEEP_BYTES or more are kept by the first `analyze` (no marker first), and
    the second renders the same bytes from them; smaller ones still leave a marker first. The setting itself does
    not change the entry's key."""
    monkeypatch.setenv("TRACEINSIGHT_ANALYSIS_KEEP_BYTES", str(SMALL.stat().st_size + 1))
    run(SMALL, "--format", "json")
    assert kept(cache_dir) == []  # below the size: a marker only
    monkeypatch.setenv("TRACEINSIGHT_ANALYSIS_KEEP_BYTES", str(SMALL.stat().st_size))
    assert not list((cache_dir / "analysis").glob("*.duckdb"))
    first = run(NSYS, "--format", "json")
    assert len(kept(cache_dir)) == 1  # at or above it: kept at once
    assert run(NSYS, "--format", "json") == first == run(NSYS, "--format", "json", "--no-cache")
    assert analysis_cache.keep_at_once([NSYS, SMALL]) and not analysis_cache.keep_at_once([REPO / "missing"])


def test_an_entry_that_cannot_be_written_or_a_report_that_fails_keeps_nothing(
        cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run that keeps an analysis writes its tables into the entry's temporary file and renders from there
    (`analysis_cache.keeping`): when that file cannot be written, the report comes from tables written in memory,
    the same bytes, and nothing is kept; when the report fails, the half-written entry is deleted."""
    import duckdb

    from traceinsight.report import tables

    monkeypatch.setenv("TRACEINSIGHT_ANALYSIS_KEEP_BYTES", "0")  # kept at the first analysis
    write_tables = tables.write_tables

    def full_disk(db: object, analyses: object, into: str | None = None) -> None:
        if into is not None:
            write_tables(db, analyses, into=into)  # type: ignore[arg-type]
            raise duckdb.IOException("no space left on device")
        write_tables(db, analyses)  # type: ignore[arg-type]

    monkeypatch.setattr(tables, "write_tables", full_disk)
    assert run(SMALL, "--format", "json") == run(SMALL, "--format", "json", "--no-cache")
    assert list((cache_dir / "analysis").iterdir()) == []  # no entry, no temporary file, no marker
    monkeypatch.setattr(tables, "write_tables", write_tables)
    code, _, err = run(SMALL, "--format", "json", "--out", str(tmp_path / "missing" / "r.json"))
    assert code != 0 and "r.json" in err, err  # the report cannot be written
    assert list((cache_dir / "analysis").iterdir()) == []
    first = run(SMALL, "--format", "json")
    assert len(kept(cache_dir)) == 1 and run(SMALL, "--format", "json") == first
