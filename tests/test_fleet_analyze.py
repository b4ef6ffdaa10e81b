"""`traceinsight fleet analyze` on the shared and committed traces, on a local process pool and on a local Ray
instance that the test starts (`ray start --head`): both datasets equal the single-process analysis, table by
table, and the golden snapshots (tests/golden.py) that single-process analysis is held to.

(FA3's serving replay is left out as the goldens leave it out: 30 s to analyze, held by tests/test_fa3_model.py.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pytest
from golden import CASES, EVIDENCE_KEYS
from golden import path as golden_path

from traceinsight.fleet.dataset import MANIFEST, PART, SUMMARY
from traceinsight.fleet.task import DEFAULT_TABLES
from traceinsight.ingest.paths import expand_paths, ncu_for, sidecar_for
from traceinsight.model.kernel_table import ensure_labels

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces"
LEFT_OUT = ("serving_q64kv8d128_fa3_torch", "inventory.json",  # and examples/engines' list of its traces
            "abtest.truth.json")  # examples/abtest: the pairs and their expected verdicts
# Columns that say how and when a trace ran, not what its analysis found.
RUN_COLUMNS = {"seconds", "analyzed"}


def fleet_inputs() -> list[str]:
    return [str(p) for p in expand_paths([SHARED, REPO / "tests" / "data", REPO / "examples"])
            if not any(n in p.name for n in LEFT_OUT)]


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "traceinsight", *args], capture_output=True, text=True,
                          timeout=600, cwd=REPO)


@pytest.fixture(scope="module")
def inputs() -> list[str]:
    found = fleet_inputs()
    assert len(found) >= 25, found
    return found


@pytest.fixture(scope="module")
def pool_dataset(tmp_path_factory: pytest.TempPathFactory, inputs: list[str]) -> Path:
    out = tmp_path_factory.mktemp("fleet") / "pool"
    r = _run(["fleet", "analyze", *inputs, "--out", str(out), "--workers", "2", "--reports", "json,html",
              "--no-cache", "-q"])
    assert r.returncode == 4, r.stderr  # one input is not a trace (tracelens_kernel_times.json.gz, below)
    return out


# Runs inside a network namespace of its own (`unshare -n`, loopback only), so that Ray's head, workers and the
# driver talk over 127.0.0.1 (outside one, Ray binds the machine's interface address), with a token of its own.
RAY_SCRIPT = """
set -e
ip link set lo up
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
export RAY_USAGE_STATS_ENABLED=0
# A loaded CI machine can starve the GCS for a minute: Ray's default 60 s before a worker gives up on it
# ("Failed to connect to GCS within 60 seconds") failed this fixture once under a concurrent test run.
export RAY_gcs_rpc_server_reconnect_timeout_s=300
ray=$(dirname "$PYTHON")/ray
"$ray" start --head --port=6379 --num-cpus=2 --include-dashboard=false --disable-usage-stats \
    --temp-dir="$RAY_TMP" --object-store-memory=200000000 > "$RAY_TMP/start.log" 2>&1
trap '"$ray" stop --force > /dev/null 2>&1' EXIT
"$PYTHON" -m traceinsight fleet analyze "$@"
"""


@pytest.fixture(scope="module")
def ray_dataset(tmp_path_factory: pytest.TempPathFactory, inputs: list[str]) -> Path:
    if not Path(sys.executable).with_name("ray").exists():
        pytest.fail("Ray is not installed: the [test] extra pins it (pip install -e '.[test]')")
    out = tmp_path_factory.mktemp("fleet") / "ray"
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    try:
        r = subprocess.run(["unshare", "-n", "bash", "-c", RAY_SCRIPT, "ray-fleet", *inputs, "--out", str(out),
                            "--ray", "127.0.0.1:6379", "--reports", "json", "--no-cache", "-q"],
                           capture_output=True, text=True, timeout=600, cwd=REPO,
                           env=dict(os.environ, PYTHON=sys.executable, RAY_TMP=ray_tmp))
        assert r.returncode == 4, r.stderr[-3000:]  # the same input that is not a trace
        assert "on Ray (127.0.0.1:6379)" in r.stdout, r.stdout
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return out


def manifest(ds: Path) -> dict[str, Any]:
    return json.loads((ds / MANIFEST).read_text())


def table(ds: Path, name: str) -> list[dict[str, Any]]:
    """Every row of `name` over the dataset, as dicts (with the `trace` partition), in a stable order."""
    with duckdb.connect() as con:
        rel = con.sql(f"SELECT * FROM read_parquet('{ds}/{name}/*/*.parquet', hive_partitioning = true, "
                      "union_by_name = true, hive_types = {'trace': VARCHAR})")
        cols = rel.columns
        rows = [dict(zip(cols, r, strict=True)) for r in rel.fetchall()]
    return sorted(({k: v for k, v in r.items() if k not in RUN_COLUMNS} for r in rows),
                  key=lambda r: json.dumps(r, sort_keys=True, default=str))


def snapshot(ds: Path, key: str) -> dict[str, Any]:
    """What tests/golden.py holds of an analysis, rebuilt from the dataset's tables for trace `key`."""
    with duckdb.connect() as con:
        return _snapshot(con, ds, key)


def _snapshot(con: duckdb.DuckDBPyConnection, ds: Path, key: str) -> dict[str, Any]:

    def rows(name: str, order: str) -> list[dict[str, Any]]:
        rel = con.sql(f"SELECT * FROM read_parquet('{ds}/{name}/trace={key}/{PART}') ORDER BY {order}")
        return [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]

    models = {m["kernel_id"]: m for m in rows("launch_models", "kernel_id")}
    launches: dict[int, list[Any]] = {}
    for x in rows("attention_launches", "step, start_ns"):
        m = models.get(x["kernel_id"])
        launches.setdefault(x["step"], []).append(
            [x["kernel"], x["phase"], x["split_kv"], None if m is None else m["predicted_ns"],
             None if m is None or m["sm_idle"] is None else round(m["sm_idle"], 4)])
    steps = [{"name": s["name"], "wall_ns": s["wall_ns"], "launches": launches.get(s["step"], [])}
             for s in rows("steps", "step")]
    findings = []
    for f in rows("findings", "finding"):
        ev = json.loads(f["evidence_json"])
        findings.append([f["rule_id"], f["severity"], list(f["steps"]), f["saving_ns"],
                         {k: ev[k] for k in EVIDENCE_KEYS if k in ev}])
    findings.sort(key=lambda r: json.dumps(r, sort_keys=True))
    rel = con.sql(f"SELECT rule_id, status FROM read_parquet('{ds}/rule_checks/trace={key}/{PART}')")
    return json.loads(json.dumps({"steps": steps, "findings": findings,
                                  "checks": [list(r) for r in rel.fetchall()]}))


def golden_cases_of_the_fleet() -> dict[str, str]:
    """Golden case -> its trace's absolute path, for the cases analyzed as the fleet analyzes a trace: with the
    sidecar and the ncu CSV beside it, if any."""
    out = {}
    for name, (trace, meta, ncu) in CASES.items():
        p = (REPO / trace).resolve()
        if (tuple((REPO / m).resolve() for m in meta) != tuple(s.resolve() for s in sidecar_for(p))
                or tuple((REPO / n).resolve() for n in ncu) != tuple(s.resolve() for s in ncu_for(p))):
            continue
        out[name] = str(p)
    return out


def key_of(ds: Path, source: str) -> str:
    for e in manifest(ds)["traces"]:
        if os.path.realpath(e["source"]) == source or source in map(os.path.realpath, e.get("aliases", [])):
            return str(e["trace"])
    raise AssertionError(f"{source} is not in {ds}")


def test_the_pool_analyzes_every_trace_and_records_the_one_that_is_not(pool_dataset: Path,
                                                                        inputs: list[str]) -> None:
    m = manifest(pool_dataset)
    entries = m["traces"]
    # Two inputs are byte-identical copies (examples/h200 holds two of the shared traces): analyzed once each.
    assert len(entries) + sum(len(e["aliases"]) for e in entries) == len(inputs)
    failed = [e for e in entries if e["status"] != "ok"]
    # tracelens_kernel_times.json.gz is a list of kernel times, not a trace: recorded, the fleet went on.
    assert [Path(e["source"]).name for e in failed] == ["tracelens_kernel_times.json.gz"]
    assert "neither a Kineto/torch.profiler trace" in failed[0]["error"]
    assert m["counts"] == {"ok": len(entries) - 1, "error": 1, "pending": 0}
    for e in entries:
        if e["status"] == "ok":
            assert set(e["rows"]) == {SUMMARY, *DEFAULT_TABLES} and e["rows"][SUMMARY] == 1
            assert (pool_dataset / e["reports"]["json"]).is_file()
            doc = json.loads((pool_dataset / e["reports"]["json"]).read_text())
            assert doc["trace"]["path"] == e["source"]
    assert not list(pool_dataset.rglob("*.tmp"))


@pytest.mark.parametrize("case", sorted(golden_cases_of_the_fleet()))
def test_pool_and_ray_equal_the_golden_single_process_analysis(case: str, pool_dataset: Path,
                                                               ray_dataset: Path) -> None:
    import gzip

    want = json.loads(gzip.decompress(golden_path(case).read_bytes()))
    source = golden_cases_of_the_fleet()[case]
    for ds in (pool_dataset, ray_dataset):
        assert snapshot(ds, key_of(ds, source)) == want, f"{ds.name}: {case}"


def test_enough_golden_cases_are_compared() -> None:
    assert len(golden_cases_of_the_fleet()) >= 15


def test_pool_and_ray_datasets_are_equal_table_by_table(pool_dataset: Path, ray_dataset: Path) -> None:
    pool, ray = manifest(pool_dataset), manifest(ray_dataset)
    assert {e["trace"]: (e["source"], e["status"], e["rows"]) for e in pool["traces"]} == {
        e["trace"]: (e["source"], e["status"], e["rows"]) for e in ray["traces"]}
    for name in sorted(set(pool["tables"]) | set(ray["tables"])):
        assert table(pool_dataset, name) == table(ray_dataset, name), name


def test_traces_outside_the_goldens_equal_their_single_process_analysis(pool_dataset: Path) -> None:
    """The traces no golden covers (foreign stacks, the committed test data, traces whose golden adds an ncu
    CSV): each partition holds the rows of the same trace and sidecar analyzed here, in this one process."""
    from traceinsight.ingest.parquet import partition_query
    from traceinsight.pipeline import analyze
    from traceinsight.report.tables import write_tables

    golden_sources = set(golden_cases_of_the_fleet().values())
    rest = [e for e in manifest(pool_dataset)["traces"]
            if e["status"] == "ok" and os.path.realpath(e["source"]) not in golden_sources]
    assert len(rest) >= 8
    for e in rest:
        db, analyses = analyze([Path(e["source"])], meta=[Path(e["sidecar"])] if e["sidecar"] else [],
                               ncu=[Path(e["ncu"])] if e["ncu"] else [], cache=False)
        write_tables(db, analyses)
        ensure_labels(db)
        for name in ("steps", "step_breakdown", "attention_launches", "launch_models", "findings", "rule_checks",
                     "kernel_labels", "devices"):
            want = sorted(db.con.sql(partition_query(db, name, analyses[0].trace_id)).fetchall(),
                          key=lambda r: json.dumps(r, default=str))
            assert table_of(pool_dataset, name, e["trace"]) == want, f"{name} of {e['trace']}"
        db.close()


def table_of(ds: Path, name: str, key: str) -> list[tuple[Any, ...]]:
    f = ds / name / f"trace={key}" / PART
    with duckdb.connect() as con:
        rows = con.sql(f"SELECT * FROM read_parquet('{f}', hive_partitioning = false)").fetchall()
    return sorted(rows, key=lambda r: json.dumps(r, default=str))


def test_a_copy_of_the_dataset_reads_the_same_from_another_folder(pool_dataset: Path, tmp_path: Path) -> None:
    """The dataset holds no absolute paths of its own: copied elsewhere, every table reads the same."""
    copy = tmp_path / "copy"
    shutil.copytree(pool_dataset, copy)
    assert table(copy, "summary") == table(pool_dataset, "summary")


def _finding_ids(doc: dict[str, Any]) -> set[str]:
    """Every finding's id: its ref (its rule id and its number among that rule's findings, latency-spike#3)."""
    return {f.get("ref") or f["id"] for f in doc.get("findings") or []}


def test_every_finding_of_the_json_is_on_the_html_page(pool_dataset: Path) -> None:
    """Each trace's HTML report (as `analyze --format html` renders it) names every finding of its JSON report by
    its ref, root causes and their evidence alike (issue 27: decode-on-prefill-kernel, the sweep's evidence
    of its slow path, was in the text and the JSON and nowhere on the page)."""
    seen = 0
    for e in manifest(pool_dataset)["traces"]:
        if e["status"] != "ok":
            continue
        doc = json.loads((pool_dataset / e["reports"]["json"]).read_text())
        page = (pool_dataset / e["reports"]["html"]).read_text()
        verdict = page[page.index('data-section="verdict"'):page.index('data-section="timeline"')]
        missing = sorted(i for i in _finding_ids(doc) if f'<span class="fid">{i}</span>' not in verdict)
        assert not missing, f"{e['source']}: {missing} not in the HTML verdict"
        seen += len(doc.get("findings") or [])
    assert seen >= 100, seen


def test_every_finding_of_the_json_is_on_the_dashboard_page(pool_dataset: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The dashboard (Streamlit's own test harness, in this process), opened on the dataset as
    `traceinsight dashboard --fleet DIR` opens it, shows every finding of each trace's JSON report by its ref (as
    code: `latency-spike#3`)."""
    pytest.importorskip("streamlit", reason="the dashboard extra (streamlit) is not installed")
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TRACEINSIGHT_DASHBOARD_FLEET", str(pool_dataset))
    at = AppTest.from_file(str(REPO / "dashboards" / "app.py"), default_timeout=240)
    at.run()
    at.radio(key="view").set_value("One trace").run()
    at.radio(key="source_kind").set_value("Command line").run()
    by_key = {e["trace"]: e for e in manifest(pool_dataset)["traces"] if e["status"] == "ok"}
    labels = [o for o in at.selectbox(key="example").options if o.endswith(" (saved)")]
    assert len(labels) == len(by_key), labels
    for label in labels:
        e = by_key[label.split("/", 1)[1].removesuffix(" (saved)")]
        at.selectbox(key="example").set_value(label).run()
        assert not at.exception, (label, [x.value for x in at.exception])
        shown = "\n".join(str(m.value) for m in [*at.markdown, *at.error, *at.warning, *at.info, *at.success])
        doc = json.loads((pool_dataset / e["reports"]["json"]).read_text())
        missing = sorted(i for i in _finding_ids(doc) if f"`{i}`" not in shown)
        assert not missing, f"{e['source']}: {missing} not on the dashboard page"


def test_savings_in_steps_stay_below_the_steps_time_minus_their_floor(pool_dataset: Path) -> None:
    """Issue 27: on every shared and example trace (the JSON reports the pool wrote, no analysis of its own), the
    root causes' savings inside steps stay below the steps' time minus their floor, what the steps would still
    take with the remedies (never zero where something is claimed); before, the FA2 sweep listed 214 ms of
    214 ms."""
    checked = 0
    for e in manifest(pool_dataset)["traces"]:
        if e["status"] != "ok":
            continue
        doc = json.loads((pool_dataset / e["reports"]["json"]).read_text())
        t = doc["savings"]
        assert t["listed_steps_ns"] <= t["steps_wall_ns"] - t["steps_floor_ns"], e["source"]
        assert 0 <= t["steps_floor_ns"] <= t["steps_wall_ns"], e["source"]
        if t["listed_steps_ns"]:
            assert t["steps_floor_ns"] > 0 and t["listed_steps_ns"] < t["steps_wall_ns"], e["source"]
            checked += 1
    assert checked >= 10
