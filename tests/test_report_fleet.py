"""`traceinsight fleet report DIR` on a real dataset (conftest's `fleet_dataset`: four real traces analyzed by
`fleet analyze`, and one file that is not a trace). Every figure of the report is checked against what the
dataset holds, read here without the report's SQL: the Parquet files through pyarrow (summed in Python) and each
trace's own JSON report (`reports/<trace>.json`, whose `savings` bound what its root causes cost)."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from traceinsight.cli.main import main
from traceinsight.report.fleet import fleet_findings

TOP = 10


def _cli(*args: str) -> Result:
    return CliRunner().invoke(main, ["fleet", "report", *args])


def _table(root: Path, name: str) -> list[dict[str, Any]]:
    """Every row of one table of the dataset, with its trace key (the hive partition) added."""
    rows = []
    for part in sorted((root / name).glob("trace=*/part-0.parquet")):
        key = part.parent.name.removeprefix("trace=")
        rows += [{**r, "trace": key} for r in pq.read_table(part).to_pylist()]
    return rows


@pytest.fixture(scope="module")
def doc(fleet_dataset: Path) -> dict[str, Any]:
    r = _cli(str(fleet_dataset), "--format", "json", "--top", str(TOP))
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def manifest(fleet_dataset: Path) -> dict[str, Any]:
    return json.loads((fleet_dataset / "manifest.json").read_text())  # type: ignore[no-any-return]


def test_json_is_versioned_and_counts_every_trace(doc: dict[str, Any], fleet_dataset: Path) -> None:
    assert doc["schema"] == "traceinsight.fleet-report/1"
    assert doc["dataset"]["path"] == str(fleet_dataset) and doc["dataset"]["schema"] == "traceinsight.fleet/1"
    ov = doc["overview"]
    assert (ov["traces"], ov["ok"], ov["error"], ov["pending"]) == (5, 4, 1, 0)
    assert ov["gpus"] == [{"name": "NVIDIA H200", "traces": 3}, {"name": "NVIDIA H100 80GB HBM3", "traces": 1}]
    summary = _table(fleet_dataset, "summary")
    assert ov["steps"] == sum(r["steps"] for r in summary)
    assert ov["steps_wall_ns"] == sum(r["steps_wall_ns"] for r in summary)
    assert ov["lost_ns"] == sum(r["saving_ns"] for r in summary) == ov["lost_steps_ns"] + ov["lost_between_ns"]
    assert 0 < ov["lost_steps_ns"] <= ov["steps_wall_ns"] and 0 < ov["lost_between_ns"] <= ov["between_steps_ns"]


def test_each_traces_time_lost_is_its_own_reports_bounded_savings(doc: dict[str, Any], fleet_dataset: Path,
                                                                 manifest: dict[str, Any]) -> None:
    summary = {r["trace"]: r for r in _table(fleet_dataset, "summary")}
    ok = {e["trace"] for e in manifest["traces"] if e["status"] == "ok"}
    assert [t["trace"] for t in doc["traces"]] == sorted(ok, key=lambda k: (-summary[k]["saving_ns"], k))
    for t in doc["traces"]:
        own = json.loads((fleet_dataset / t["report"]["json"]).read_text())
        s = own["savings"]
        assert t["lost_ns"] == s["listed_steps_ns"] + s["listed_between_ns"], t["trace"]
        assert (t["lost_steps_ns"], t["lost_between_ns"]) == (s["listed_steps_ns"], s["listed_between_ns"])
        assert (t["steps_wall_ns"], t["between_steps_ns"]) == (s["steps_wall_ns"], s["between_steps_ns"])
        roots = [f for f in own["findings"] if f.get("supports") is None]
        assert {c["rule_id"] for c in t["root_causes"]} == {f["id"] for f in roots}
        for c in t["root_causes"]:
            assert c["lost_ns"] == sum(f["attributed_saving_ns"] or 0 for f in roots if f["id"] == c["rule_id"])
        row = summary[t["trace"]]
        assert (t["gpu"], t["steps"], t["step_p50_ns"], t["step_p99_ns"]) == (
            row["gpu"], row["steps"], row["step_p50_ns"], row["step_p99_ns"])
        assert t["report"] == {"json": f"reports/{t['trace']}.json", "html": f"reports/{t['trace']}.html"}
    # The nsys export of the real sweep runs B = 148..256 with a long request past B_th: split-KV off costs most.
    assert doc["traces"][0]["trace"] == "sweep_q64kv8d128_nsys"
    assert doc["traces"][0]["root_causes"][0]["rule_id"] == "split-kv-off"


def test_root_causes_match_the_findings_table(doc: dict[str, Any], fleet_dataset: Path) -> None:
    findings = _table(fleet_dataset, "findings")
    roots = [f for f in findings if f["supports"] is None]
    ok = len(doc["traces"])
    expected = {}
    for rule in {f["rule_id"] for f in roots}:
        mine = [f for f in roots if f["rule_id"] == rule]
        per_trace: dict[str, int] = {}
        for f in mine:
            per_trace[f["trace"]] = per_trace.get(f["trace"], 0) + (f["attributed_saving_ns"] or 0)
        worst = min(per_trace, key=lambda k: (-per_trace[k], k))
        expected[rule] = {"traces": len(per_trace), "share_of_traces": len(per_trace) / ok, "findings": len(mine),
                          "steps": len({(f["trace"], s) for f in mine for s in f["steps"]}),
                          "lost_ns": sum(per_trace.values()), "worst_trace": worst,
                          "worst_trace_lost_ns": per_trace[worst]}
    got = {r["rule_id"]: {k: r[k] for k in expected.get(r["rule_id"], {})} for r in doc["root_causes"]}
    assert got == expected
    losses = [r["lost_ns"] for r in doc["root_causes"]]
    assert losses == sorted(losses, reverse=True) and sum(losses) == doc["overview"]["lost_ns"]
    evidence_only = {f["rule_id"] for f in findings} - set(expected)
    assert {r["rule_id"] for r in doc["evidence_only"]} == evidence_only


def test_worst_steps_are_the_slowest_of_the_steps_table(doc: dict[str, Any], fleet_dataset: Path) -> None:
    steps = _table(fleet_dataset, "steps")
    summary = {r["trace"]: r for r in _table(fleet_dataset, "summary")}
    findings = _table(fleet_dataset, "findings")
    top = sorted(steps, key=lambda s: (-s["dur_ns"], s["trace"], s["step"]))[:TOP]
    assert [(w["trace"], w["step"], w["name"], w["dur_ns"], w["wall_ns"]) for w in doc["worst_steps"]] == [
        (s["trace"], s["step"], s["name"], s["dur_ns"], s["wall_ns"]) for s in top]
    for w in doc["worst_steps"]:
        median = summary[w["trace"]]["step_p50_ns"]
        assert w["median_ns"] == median and w["ratio"] == pytest.approx(w["dur_ns"] / median)
        naming = sorted((f for f in findings if f["trace"] == w["trace"] and w["step"] in f["steps"]),
                        key=lambda f: f["finding"])
        assert w["findings"] == list(dict.fromkeys(f["rule_id"] for f in naming))
        assert w["report"] == f"reports/{w['trace']}.html#timeline"
    # The sweep's skewed B = 148..256 steps run split-KV off: ~18.9 ms where its median step takes ~0.7 ms.
    sweep = [w for w in doc["worst_steps"] if w["trace"] == "sweep_q64kv8d128_nsys"]
    assert sweep and all(w["ratio"] > 10 and "split-kv-off" in w["findings"] for w in sweep)


def test_outliers_and_failed_traces(doc: dict[str, Any], fleet_dataset: Path, manifest: dict[str, Any]) -> None:
    rows = [{**r} for r in _table(fleet_dataset, "summary")]
    assert doc["outliers"] == json.loads(json.dumps(fleet_findings(rows)))
    assert {f["trace"] for f in doc["outliers"]} <= {t["trace"] for t in doc["traces"]}
    (failed,) = doc["failed"]
    (entry,) = [e for e in manifest["traces"] if e["status"] == "error"]
    assert (failed["trace"], failed["status"], failed["source"], failed["error"]) == (
        "broken", "error", entry["source"], entry["error"])
    assert "unknown format" in failed["error"]


@pytest.mark.parametrize("width", [80, 120, 200])
def test_text_keeps_to_the_width_and_names_every_part(fleet_dataset: Path, doc: dict[str, Any], width: int) -> None:
    r = _cli(str(fleet_dataset), "--width", str(width))
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= width
    text = r.stdout
    for heading in ("Root causes", "Traces, most time lost first", "Worst steps of the fleet", "Outliers",
                    "Not analyzed (1)"):
        assert heading in text
    flat = re.sub(r"\s+", " ", text)
    assert "unknown format" in flat and "broken" in flat
    from traceinsight.units import fmt_ns

    assert f"time lost (root causes' bounded savings): {fmt_ns(doc['overview']['lost_ns'])}" in flat
    first = doc["root_causes"][0]
    assert re.search(rf"{first['rule_id']} +{first['traces']} of 4 \(\d+%\) .*{re.escape(fmt_ns(first['lost_ns']))}",
                     text)


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        if a.get("id"):
            self.ids.add(str(a["id"]))
        if tag == "a" and a.get("href"):
            self.hrefs.append(str(a["href"]))


def _check_links(page: Path) -> list[str]:
    """Every link of `page` leads to a file that exists (and to an element of it when it has an anchor)."""
    p = _Links()
    p.feed(page.read_text())
    assert p.scripts == 0 and "http" not in " ".join(p.hrefs)
    files = []
    for h in p.hrefs:
        path, _, anchor = h.partition("#")
        if not path:
            assert anchor in p.ids, h
            continue
        target = (page.parent / unquote(path)).resolve()
        assert target.is_file(), h
        if anchor:
            t = _Links()
            t.feed(target.read_text())
            assert anchor in t.ids, h
        files.append(path)
    return files


def test_html_opens_offline_with_working_relative_links(fleet_dataset: Path, doc: dict[str, Any],
                                                        tmp_path: Path) -> None:
    r = _cli(str(fleet_dataset), "--format", "html")
    assert r.exit_code == 0, r.output
    page = fleet_dataset / "fleet.html"  # the default: into the dataset, beside reports/
    files = _check_links(page)
    assert {f"reports/{t['trace']}.html" for t in doc["traces"]} <= set(files)
    text = page.read_text()
    assert "sweep_q64kv8d128_nsys" in text and "unknown format" in text and "split-kv-off" in text
    # Written elsewhere, the links still reach the dataset (relative to the page's folder).
    (tmp_path / "elsewhere").mkdir()
    out = tmp_path / "elsewhere" / "fleet.html"
    assert _cli(str(fleet_dataset), "--format", "html", "--out", str(out)).exit_code == 0
    assert all(f.startswith("../") for f in _check_links(out))


def test_markdown_links_relative_to_its_file(fleet_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "fleet.md"
    r = _cli(str(fleet_dataset), "--format", "md", "--out", str(out), "--top", "3")
    assert r.exit_code == 0, r.output
    text = out.read_text()
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert links and all((out.parent / unquote(link.partition("#")[0])).is_file() for link in links)
    assert "## Worst steps (3 slowest)" in text and "| broken | error |" in text


def _listing(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_bad_input_one_line_exit_2_nothing_written(fleet_dataset: Path, tmp_path: Path) -> None:
    not_dataset = tmp_path / "plain"
    not_dataset.mkdir()
    (not_dataset / "notes.txt").write_text("x")
    other = tmp_path / "export"  # what `traceinsight export --parquet` writes: another manifest
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"schema": "traceinsight.parquet/1", "traces": []}))
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "manifest.json").write_bytes(gzip.compress(b"{}"))
    a_file = tmp_path / "trace.json"
    a_file.write_text("{}")
    cases = {tmp_path / "missing": "no such folder", a_file: "not a folder", not_dataset: "not a fleet dataset",
             other: "traceinsight.parquet/1", damaged: "unreadable manifest"}
    for path, message in cases.items():
        before = _listing(tmp_path)
        for fmt in ("text", "html", "json"):
            r = _cli(str(path), "--format", fmt)
            assert r.exit_code == 2, (path, fmt, r.output)
            assert r.stdout == "" and len(r.stderr.splitlines()) == 1 and message in r.stderr, r.stderr
            assert "Traceback" not in r.stderr
        assert _listing(tmp_path) == before, path
    r = _cli(str(fleet_dataset), "--format", "json", "--out", str(tmp_path / "no" / "such" / "x.json"))
    assert r.exit_code == 2 and "does not exist" in r.stderr


def test_the_report_changes_nothing_in_the_dataset(fleet_dataset: Path, tmp_path: Path) -> None:
    copy = tmp_path / "ds"
    shutil.copytree(fleet_dataset, copy)
    (copy / "fleet.html").unlink(missing_ok=True)
    before = _listing(copy)
    for fmt in ("text", "json", "md"):
        assert _cli(str(copy), "--format", fmt).exit_code == 0
    assert _listing(copy) == before
    assert _cli(str(copy), "--format", "html").exit_code == 0
    assert set(_listing(copy)) - set(before) == {"fleet.html"}


def test_a_pending_trace_is_left_out_until_it_is_analyzed(fleet_dataset: Path, tmp_path: Path) -> None:
    """A run killed mid-way leaves its traces 'pending' (their old files may still lie there): not counted."""
    copy = tmp_path / "ds"
    shutil.copytree(fleet_dataset, copy)
    m = json.loads((copy / "manifest.json").read_text())
    for e in m["traces"]:
        if e["trace"] == "flashinfer_decode":
            e["status"] = "pending"
    (copy / "manifest.json").write_text(json.dumps(m))
    r = _cli(str(copy), "--format", "json")
    d = json.loads(r.stdout)
    assert (d["overview"]["ok"], d["overview"]["pending"]) == (3, 1)
    assert "flashinfer_decode" not in {t["trace"] for t in d["traces"]}
    assert {(f["trace"], f["status"]) for f in d["failed"]} == {("broken", "error"), ("flashinfer_decode", "pending")}


def test_dashboard_fleet_page(fleet_dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("streamlit", reason="the dashboard extra (streamlit) is not installed")
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TRACEINSIGHT_DASHBOARD_FLEET", str(fleet_dataset))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "dashboards" / "app.py"), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [h.value for h in at.header] == ["Root causes", "Traces", "Worst steps", "Outliers", "Not analyzed"]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["traces analyzed"] == "4 of 5" and metrics["failed / pending"] == "1 / 0"
    assert len(at.get("vega_lite_chart")) == 1  # time lost per trace, by root cause
    traces = next(d.value for d in at.dataframe if "root causes" in d.value.columns)
    assert list(traces["trace"])[0] == "sweep_q64kv8d128_nsys"
    failed = next(d.value for d in at.dataframe if "error" in d.value.columns)
    assert list(failed["trace"]) == ["broken"]
    assert at.sidebar.radio(key="view").options == ["Fleet", "One trace"]  # the one-trace view stays a click away


def test_docs_example_is_the_real_output(fleet_dataset: Path) -> None:
    """docs/FLEET.md shows `fleet report` on the same traces as this module's dataset: its root-cause, trace,
    worst-step and outlier lines must be what the report prints (paths aside)."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "FLEET.md").read_text()
    sample = doc.split("<!-- fleet-report-sample -->")[1].split("<!-- /fleet-report-sample -->")[0]
    lines = sample.splitlines()
    shown = lines[lines.index("Root causes, most time lost first"):next(
        i for i, line in enumerate(lines) if line.startswith("Not analyzed"))]
    r = _cli(str(fleet_dataset), "--width", "120")
    assert r.exit_code == 0, r.output
    real = r.stdout.splitlines()
    for line in shown:
        if "each one's report" not in line:
            assert line in real, line


def test_dashboard_fleet_option_checks_the_dataset_before_starting(fleet_dataset: Path, tmp_path: Path) -> None:
    from traceinsight.cli.dashboard import FLEET_ENV, streamlit_command

    r = CliRunner().invoke(main, ["dashboard", "--fleet", str(tmp_path), "--headless"])
    assert r.exit_code == 2 and "not a fleet dataset" in r.stderr and len(r.stderr.splitlines()) == 1
    _, env = streamlit_command([], None, "localhost", 10, True, fleet=fleet_dataset)
    assert env[FLEET_ENV] == str(fleet_dataset.resolve())
    assert streamlit_command([], None, "localhost", 10, True)[1][FLEET_ENV] == ""


def test_a_trace_without_its_summary_is_left_out_and_a_damaged_file_is_one_line(fleet_dataset: Path,
                                                                                 tmp_path: Path) -> None:
    copy = tmp_path / "ds"
    shutil.copytree(fleet_dataset, copy)
    (copy / "summary" / "trace=flashinfer_decode" / "part-0.parquet").unlink()
    d = json.loads(_cli(str(copy), "--format", "json").stdout)
    assert (d["overview"]["ok"], d["overview"]["missing"]) == (3, 1)
    # None of its rows counts anywhere (its findings and steps are still on disk).
    assert all(r["worst_trace"] != "flashinfer_decode" for r in d["root_causes"])
    assert all(w["trace"] != "flashinfer_decode" for w in d["worst_steps"])
    assert ("flashinfer_decode", "missing") in {(f["trace"], f["status"]) for f in d["failed"]}
    (copy / "steps" / "trace=sweep_q64kv8d128_nsys" / "part-0.parquet").write_bytes(b"not parquet")
    r = _cli(str(copy))
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1 and "cannot read the dataset's tables" in r.stderr
