"""`fleet analyze` as a long-running job: resumable (unchanged traces skipped by content, changed ones analyzed
again), a failing trace recorded without stopping the others, a killed run resumed, inputs from a list file, from
`file://` URLs and from an fsspec object store (fsspec's in-memory store, with the real download path)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from traceinsight.cli import main
from traceinsight.fleet.dataset import MANIFEST, PART, SUMMARY
from traceinsight.fleet.run import FleetOptions, analyze_fleet
from traceinsight.fleet.runners import RunnerSpec
from traceinsight.ingest.paths import expand_paths, ncu_for, sidecar_for

REPO = Path(__file__).resolve().parents[1]
H200 = REPO.parent / "shared" / "traces" / "h200"
TRACELENS = REPO / "tests" / "data" / "foreign" / "tracelens"
SMALL = H200 / "flashinfer_decode_small.pt.trace.json.gz"
SGLANG = TRACELENS / "sglang_mi300x_Qwen3-8B_decode.json.gz"
VLLM = TRACELENS / "vllm_mi300x_gptoss_decode_graph_execution.json.gz"
SERIAL = RunnerSpec(workers=1)
FAST = FleetOptions(reports=("json",), cache=False)


def _sql(query: str) -> list[tuple[Any, ...]]:
    """The rows of `query`, on a connection of its own closed after (none is left for the exit to report)."""
    import duckdb

    with duckdb.connect() as con:
        return con.sql(query).fetchall()


def _manifest(ds: Path) -> dict:
    return json.loads((ds / MANIFEST).read_text())


def _entries(ds: Path) -> dict[str, dict]:
    return {Path(e["source"]).name: e for e in _manifest(ds)["traces"]}


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    d = tmp_path / "traces"
    d.mkdir()
    shutil.copy(SMALL, d / "small.pt.trace.json.gz")
    shutil.copy(SGLANG, d / "sglang.json.gz")
    (d / "cut.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "na'))  # a cut file
    return d


def test_a_second_run_skips_what_is_done_and_retries_what_failed(traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    first = analyze_fleet([str(traces)], out, SERIAL, FAST)
    assert (first.analyzed, first.skipped, first.failed) == (2, 0, 1)
    e = _entries(out)
    assert e["cut.json.gz"]["status"] == "error" and e["cut.json.gz"]["error"]
    assert "\n" not in e["cut.json.gz"]["error"]
    small_summary = out / SUMMARY / f"trace={e['small.pt.trace.json.gz']['trace']}" / PART
    mtime = small_summary.stat().st_mtime_ns

    second = analyze_fleet([str(traces)], out, SERIAL, FAST)
    assert (second.analyzed, second.skipped, second.failed) == (0, 2, 1)
    assert small_summary.stat().st_mtime_ns == mtime  # not written again

    # New content under an old name: analyzed again, its files replaced; the same content under a new name: an
    # alias of the entry that holds it, not a second analysis.
    shutil.copy(VLLM, traces / "sglang.json.gz")
    shutil.copy(SMALL, traces / "small_copy.pt.trace.json.gz")
    third = analyze_fleet([str(traces)], out, SERIAL, FAST)
    assert (third.analyzed, third.skipped, third.failed) == (1, 2, 1)
    e = _entries(out)
    assert e["small.pt.trace.json.gz"]["aliases"] == [str(traces / "small_copy.pt.trace.json.gz")]

    key = e["sglang.json.gz"]["trace"]
    ((digest, gpu),) = _sql(f"SELECT digest, gpu FROM read_parquet('{out}/{SUMMARY}/trace={key}/{PART}')")
    assert digest == e["sglang.json.gz"]["digest"] and gpu is not None
    assert len(list((out / SUMMARY).iterdir())) == 2  # the failed trace has no partition
    assert not list(out.rglob("*.tmp"))


def test_changed_options_analyze_again(traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    analyze_fleet([str(traces / "small.pt.trace.json.gz")], out, SERIAL, FAST)
    again = analyze_fleet([str(traces / "small.pt.trace.json.gz")], out, SERIAL,
                          FleetOptions(reports=("json",), cache=False, step_pattern="^decode"))
    assert again.analyzed == 1 and again.skipped == 0
    forced = analyze_fleet([str(traces / "small.pt.trace.json.gz")], out, SERIAL,
                           FleetOptions(reports=("json",), cache=False, step_pattern="^decode", force=True))
    assert forced.analyzed == 1


def test_the_cli_exits_4_with_one_line_per_failed_trace(traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    r = subprocess.run([sys.executable, "-m", "traceinsight", "fleet", "analyze", str(traces), "--out", str(out),
                        "--workers", "1", "--reports", "json", "--no-cache"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 4, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stdout.startswith("3 traces: 2 analyzed, 0 skipped (unchanged), 1 failed in ")
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("traceinsight: warning:")]
    assert len(warnings) == 1 and "cut.json.gz" in warnings[0]
    progress = [ln for ln in r.stderr.splitlines() if ln.startswith("[")]
    assert len(progress) == 3


def test_a_killed_run_resumes(tmp_path: Path) -> None:
    """SIGKILL after the first trace is recorded: the next run finishes the rest and leaves no temporary file."""
    d = tmp_path / "traces"
    d.mkdir()
    for i in range(4):
        shutil.copy(SGLANG if i % 2 else VLLM, d / f"t{i}.json.gz")
        # distinct content each: a trailing gzip member of its own index
        with open(d / f"t{i}.json.gz", "ab") as fh:
            fh.write(gzip.compress(b" " * (i + 1)))
    out = tmp_path / "ds"
    with subprocess.Popen([sys.executable, "-m", "traceinsight", "fleet", "analyze", str(d), "--out", str(out),
                           "--workers", "1", "--reports", "json", "--no-cache"], stderr=subprocess.PIPE,
                          text=True) as p:
        assert p.stderr is not None
        line = p.stderr.readline()
        assert line.startswith("[1/4]"), line
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    counts = _manifest(out)["counts"]
    assert counts["ok"] >= 1 and counts["pending"] >= 1, counts
    resumed = analyze_fleet([str(d)], out, SERIAL, FAST)
    assert resumed.skipped >= 1 and resumed.analyzed + resumed.skipped == 4 and resumed.failed == 0
    assert _manifest(out)["counts"] == {"ok": 4, "error": 0, "pending": 0}
    assert not list(out.rglob("*.tmp"))


def test_inputs_from_a_list_file_with_globs_and_file_urls(tmp_path: Path) -> None:
    listing = tmp_path / "traces.txt"
    listing.write_text(f"# replicas of this hour\n{TRACELENS}/*.json.gz\n\nfile://{SMALL}  # the H200 one\n")
    out = tmp_path / "ds"
    r = CliRunner().invoke(main, ["fleet", "analyze", "--from-list", str(listing), "--out", str(out), "--workers",
                                  "1", "--reports", "none", "--no-cache", "-q"])
    assert r.exit_code == 0, r.output
    assert sorted(_entries(out)) == sorted([SMALL.name, SGLANG.name, VLLM.name])
    assert all(not e["reports"] for e in _entries(out).values())


def test_traces_on_an_object_store_are_downloaded_with_their_sidecar(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    trace = REPO / "tests" / "data" / "h200_ncu" / "ncu_pair_torch.pt.trace.json.gz"
    meta = trace.with_name("ncu_pair_torch.sidecar.json")
    try:
        mem.pipe("/bucket/run1/ncu_pair_torch.pt.trace.json.gz", trace.read_bytes())
        mem.pipe("/bucket/run1/ncu_pair_torch.sidecar.json", meta.read_bytes())
        mem.pipe("/bucket/run1/notes.txt", b"not a trace")
        out = tmp_path / "ds"
        run = analyze_fleet(["memory://bucket/run1/"], out, SERIAL, FAST)
        assert (run.analyzed, run.failed) == (1, 0)
        (entry,) = _manifest(out)["traces"]
        # named as fsspec names them ('memory:///bucket/...'; 's3://bucket/...' on S3)
        assert entry["source"] == mem.unstrip_protocol("/bucket/run1/ncu_pair_torch.pt.trace.json.gz")
        assert entry["sidecar"] == mem.unstrip_protocol("/bucket/run1/ncu_pair_torch.sidecar.json")
        doc = json.loads((out / entry["reports"]["json"]).read_text())
        assert doc["trace"]["path"] == entry["source"]
        # The same analysis as the local files with their sidecar: the sidecar's batches were used.
        local = tmp_path / "local"
        analyze_fleet([str(trace)], local, SERIAL, FAST)
        (lentry,) = _manifest(local)["traces"]

        q = "SELECT * EXCLUDE (path, digest, seconds, analyzed) FROM read_parquet('{}')"
        assert _sql(q.format(out / SUMMARY / f"trace={entry['trace']}" / PART)) == _sql(
            q.format(local / SUMMARY / f"trace={lentry['trace']}" / PART))
        sources = _sql("SELECT DISTINCT source FROM read_parquet('{}')".format(
            out / "launch_models" / f"trace={entry['trace']}" / PART))
        assert sources == [("sidecar",)]  # the launches were planned from the downloaded sidecar's batches
        assert run.skipped == 0 and analyze_fleet(["memory://bucket/run1/"], out, SERIAL, FAST).skipped == 1
    finally:
        mem.rm("/bucket", recursive=True)


@pytest.mark.parametrize("setup, message", [
    ("file", "not a folder"),
    ("export", "not a fleet dataset"),
])
def test_an_out_that_is_not_a_fleet_dataset_is_refused_and_left_alone(tmp_path: Path, setup: str,
                                                                       message: str) -> None:
    out = tmp_path / "out"
    if setup == "file":
        out.write_text("mine")
    else:
        out.mkdir()
        (out / "manifest.json").write_text(json.dumps({"schema": "traceinsight.parquet/1", "traces": []}))
    before = {p: p.read_bytes() for p in [out, *out.rglob("*")] if p.is_file()}
    r = subprocess.run([sys.executable, "-m", "traceinsight", "fleet", "analyze", str(SGLANG), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert {p: p.read_bytes() for p in [out, *out.rglob("*")] if p.is_file()} == before


def test_folders_yield_traces_not_their_companions(tmp_path: Path) -> None:
    for name in ("a.pt.trace.json.gz", "a.sidecar.json.gz", "a.timing.json.gz", "b.sqlite", "b.nsys.meta.json",
                 "c.json", "c.meta.json", "c.sidecar.json"):
        (tmp_path / name).write_bytes(b"x")
    assert sorted(p.name for p in expand_paths([tmp_path])) == ["a.pt.trace.json.gz", "b.sqlite", "c.json"]
    assert sidecar_for(tmp_path / "a.pt.trace.json.gz") == (tmp_path / "a.sidecar.json.gz",)
    assert sidecar_for(tmp_path / "b.sqlite") == (tmp_path / "b.nsys.meta.json",)
    assert sidecar_for(tmp_path / "c.json") == (tmp_path / "c.meta.json",)  # .meta before .sidecar
    (tmp_path / "b.ncu.csv").write_bytes(b"x")
    assert ncu_for(tmp_path / "b.sqlite") == (tmp_path / "b.ncu.csv",) and ncu_for(tmp_path / "c.json") == ()
    assert "b.ncu.csv" not in [p.name for p in expand_paths([tmp_path])]


def test_progress_is_reported_per_trace(traces: Path, tmp_path: Path) -> None:
    seen: list[tuple[str, int, int]] = []
    t0 = time.perf_counter()
    analyze_fleet([str(traces)], tmp_path / "ds", SERIAL, FAST,
                  on_outcome=lambda e, done, total: seen.append((e["status"], done, total)))
    assert time.perf_counter() - t0 < 120
    assert [(d, t) for _, d, t in seen] == [(1, 3), (2, 3), (3, 3)]
    assert sorted(s for s, _, _ in seen) == ["error", "ok", "ok"]


def test_a_trace_over_its_time_limit_is_recorded_and_tried_again_later(traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    small = str(traces / "small.pt.trace.json.gz")
    late = analyze_fleet([small], out, SERIAL, FleetOptions(reports=("json",), cache=False, timeout_s=0.001))
    assert (late.analyzed, late.failed) == (0, 1)
    (entry,) = _manifest(out)["traces"]
    assert entry["error"] == "timed out after 0.001 s (--timeout)" and not entry["rows"]
    import signal as _signal

    assert _signal.getsignal(_signal.SIGALRM) is _signal.SIG_DFL  # the timer's handler was put back
    again = analyze_fleet([small], out, SERIAL, FAST)  # the limit is not part of the result: tried again, no limit
    assert (again.analyzed, again.failed) == (1, 0)


def test_ray_address_where_nothing_answers_is_one_line_at_once(tmp_path: Path) -> None:
    """An address where nothing accepts a connection: Ray's own connect retries it for minutes (over 5 here);
    `--ray` says so in a line within its connect timeout."""
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "ds"
    address = f"127.0.0.1:{port}"
    r = subprocess.run([sys.executable, "-m", "traceinsight", "fleet", "analyze", str(SGLANG), "--out", str(out),
                        "--ray", address], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (f"traceinsight: error: --ray {address}: cannot connect (nothing answers at "
                                f"{address} within 10 s)")
    assert not out.exists()


def test_ray_that_cannot_be_reached_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    # No cluster to find: 'auto' looks for one in the file <temp>/ray/ray_current_cluster and among the running
    # processes, and test_fleet_analyze.py's head (in a network namespace of its own, so unreachable from here) may
    # be running on another test worker; 'auto' then retried it past the timeout. So Ray's temp folder is one of
    # the test's own and the command runs in a process namespace of its own (root, as test_fleet_analyze.py's
    # `unshare -n`).
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": str(tmp_path)}
    r = subprocess.run(["unshare", "-p", "-f", "--mount-proc", sys.executable, "-m", "traceinsight", "fleet",
                        "analyze", str(SGLANG), "--out", str(out), "--ray", "auto"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("traceinsight: error: --ray auto: cannot connect") and "Traceback" not in r.stderr
    assert not out.exists()
