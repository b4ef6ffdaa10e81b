"""The Python API (`traceinsight.open` -> `Analysis`): its tables hold what the command's JSON document says, its
explanations, replays and reports are the commands' own, and calling it leaves the process as it found it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import traceinsight as ti
from traceinsight.errors import InputError

REPO = Path(__file__).resolve().parents[1]
SWEEP = REPO / "examples" / "h200" / "flashinfer_decode_sweep.pt.trace.json.gz"
SWEEP_META = REPO / "examples" / "h200" / "flashinfer_decode_sweep.meta.json.gz"
SMALL = REPO / "examples" / "h200" / "flashinfer_decode_small.pt.trace.json.gz"
NSYS = REPO / "examples" / "collected" / "sweep_q64kv8d128_nsys.sqlite"


def _cli(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "traceinsight", *args], capture_output=True, text=True, cwd=REPO,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def sweep() -> ti.Analysis:
    return ti.open(SWEEP, meta=SWEEP_META)


@pytest.fixture(scope="module")
def sweep_doc() -> dict:  # type: ignore[type-arg]
    return json.loads(_cli("analyze", str(SWEEP), "--meta", str(SWEEP_META), "--format", "json", "--steps", "all",
                           "--no-cache"))


def test_tables_hold_what_the_json_document_says(sweep: ti.Analysis, sweep_doc: dict) -> None:  # type: ignore[type-arg]
    steps = sweep.steps
    assert isinstance(steps, pd.DataFrame)
    assert list(steps["step"]) == [s["index"] for s in sweep_doc["steps"]]
    assert list(steps["dur_ns"]) == [s["dur_ns"] for s in sweep_doc["steps"]]
    findings = sweep.findings
    assert list(findings["rule_id"]) == [f["id"] for f in sweep_doc["findings"]]
    assert list(findings["severity"]) == [f["severity"] for f in sweep_doc["findings"]]
    checks = sweep.rule_checks.set_index("rule_id")["status"].to_dict()
    assert checks == {c["id"]: c["status"] for c in sweep_doc["checks"]}
    kernels = sweep.kernels
    assert len(kernels) == sum(k["count"] for k in sweep_doc["kernels"]) == 1074
    by_name = kernels.groupby("name")["dur_ns"].sum().to_dict()
    assert {k["name"]: k["total_ns"] for k in sweep_doc["kernels"]} == by_name
    assert {k["name"]: k["family"] for k in sweep_doc["kernels"]} == dict(zip(kernels["name"], kernels["family"],
                                                                              strict=True))
    launches = sum(len(s["launches"]) for s in sweep_doc["steps"])
    assert len(sweep.attention_launches) == launches > 0


def test_arrow_and_sql(sweep: ti.Analysis) -> None:
    table = sweep.arrow("steps")
    assert isinstance(table, pa.Table) and table.num_rows == len(sweep.steps)
    off = sweep.sql("SELECT count(*) AS n FROM steps WHERE split_kv = $on", {"on": False})
    assert int(off["n"][0]) == int((sweep.steps["split_kv"] == False).sum())  # noqa: E712 - a column of bools
    with pytest.raises(InputError, match="no table 'nope'"):
        sweep.arrow("nope")


def test_explain_and_whatif_are_the_commands(sweep: ti.Analysis) -> None:
    cli = json.loads(_cli("explain", str(SWEEP), "--meta", str(SWEEP_META), "--step", "150", "--format", "json",
                          "--no-cache"))
    assert {**sweep.explain(150).to_json(), "trace": str(SWEEP)} == cli
    whatif = json.loads(_cli("whatif", str(SWEEP), "--meta", str(SWEEP_META), "--step", "150", "--format", "json"))
    assert [r.to_json() for r in sweep.whatif(150)] == whatif["steps"]
    with pytest.raises(InputError, match="no step 9999"):
        sweep.explain(9999)


def test_reports_are_the_commands(sweep: ti.Analysis, tmp_path: Path) -> None:
    out = tmp_path / "cli.txt"
    _cli("analyze", str(SWEEP), "--meta", str(SWEEP_META), "--no-cache", "--out", str(out), "--width", "120")
    assert sweep.report("text") == out.read_text()
    assert json.loads(sweep.report("json")) == json.loads(
        _cli("analyze", str(SWEEP), "--meta", str(SWEEP_META), "--format", "json", "--no-cache"))
    html = sweep.report("html")
    assert html.startswith("<!DOCTYPE html>") and "split-kv-off" in html
    with pytest.raises(ValueError, match="unknown report format"):
        sweep.report("pdf")
    saved = sweep.save(tmp_path / "saved")
    assert _cli("report", str(saved), "--out", str(tmp_path / "again.txt"), "--width", "120") == ""
    assert (tmp_path / "again.txt").read_text() == out.read_text()


def test_bad_input_is_one_typed_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    with pytest.raises(ti.errors.TraceInsightError):  # type: ignore[attr-defined]
        ti.open(empty)
    assert empty.read_bytes() == b""


# A fresh process: its state before and after an API call, and whether the garbage collector was ever off during
# it (a thread samples it). glibc's mmap threshold cannot be read, so it is probed: a block of PROBE_MB is mapped on
# its own while the threshold is below its size; freeing a mapped block raises glibc's *dynamic* threshold to the
# block's size, so a second block of that size comes from the heap. Once anyone fixes the threshold with mallopt
# (as traceinsight.tuning.tune does, at 1 MB), both blocks are mapped.
PROBE = textwrap.dedent("""
    import ctypes, gc, json, os, signal, sys, threading, time
    import pyarrow as pa

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                   "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc.mallinfo2.restype = Mallinfo2

    def mapped_twice():
        got = []
        for _ in range(2):
            before = libc.mallinfo2().hblks
            p = libc.malloc(PROBE_MB << 20)
            got.append(libc.mallinfo2().hblks > before)
            libc.free(p)
        return got == [True, True]

    def state():
        return {"gc_enabled": gc.isenabled(), "gc_threshold": list(gc.get_threshold()),
                "gc_frozen": gc.get_freeze_count(), "arrow_pool": pa.default_memory_pool().backend_name,
                "environ": dict(os.environ), "sigint": str(signal.getsignal(signal.SIGINT)),
                "umask": os.umask(0o022), "cwd": os.getcwd(), "threshold_fixed": mapped_twice(),
                "threads": sorted(t.name for t in threading.enumerate())}

    before = state()
    os.umask(before["umask"])
    off = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            if not gc.isenabled():
                off.append(1)
            time.sleep(0.0005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    CALL
    done.set()
    watcher.join()
    after = state()
    print(json.dumps({"before": before, "after": after, "gc_off_during": bool(off)}))
""")
PROBE_MB = 20


def _probe(call: str, env_extra: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    code = PROBE.replace("PROBE_MB", str(PROBE_MB)).replace("CALL", call)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEINSIGHT_MEMORY")} | (env_extra or {})
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                       cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_api_leaves_the_process_as_it_found_it() -> None:
    call = textwrap.dedent(f"""
        import traceinsight as ti
        a = ti.open({str(SWEEP)!r}, meta={str(SWEEP_META)!r})
        a.findings; a.kernels; a.explain(); a.whatif(); a.report("html"); a.report("text")
        a.close()
    """)
    got = _probe(call)
    assert got["before"]["threshold_fixed"] is False  # the probe's premise: glibc's dynamic threshold at start
    assert got["after"] == got["before"]
    assert got["gc_off_during"] is False


def test_an_export_read_in_slices_leaves_no_thread_behind() -> None:
    """An Nsight Systems export whose tables are read a slice at a time (here slices of 64 rows) has a worker thread
    reading ahead (ingest/prefetch.py); once `open` has returned, it has ended, as it has after a read that fails.
    So has the analysis tables' writer once they are written."""
    call = textwrap.dedent(f"""
        import traceinsight as ti, traceinsight.ingest.nsys_sqlite as nsys_sqlite
        from traceinsight.ingest import prefetch
        nsys_sqlite.read.__defaults__ = (64,)
        started = []
        start = prefetch.threading.Thread.start
        def counted(self):
            started.append(self.name)
            start(self)
        prefetch.threading.Thread.start = counted
        a = ti.open({str(NSYS)!r}, cache=False)
        a.findings  # the analysis tables written: their inserts on a worker thread too (report/tables.py)
        assert "analysis-tables" not in [t.name for t in prefetch.threading.enumerate()]  # ended as they were
        a.close()
        prefetch.threading.Thread.start = start
        assert started == ["nsys-slices", "analysis-tables"], started  # the workers ran
    """)
    got = _probe(call)
    assert got["after"]["threads"] == got["before"]["threads"] == ["MainThread"]


def test_the_ingest_cache_written_beside_the_analysis_leaves_no_thread_behind(tmp_path: Path) -> None:
    """A file read now is copied into the ingest cache on a worker thread while the analysis goes on
    (ingest.load's `background`); `open` joins it before it returns, and the entry is there."""
    call = textwrap.dedent(f"""
        import threading
        import traceinsight as ti
        started = []
        start = threading.Thread.start
        def counted(self):
            started.append(self.name)
            start(self)
        threading.Thread.start = counted
        a = ti.open({str(NSYS)!r})
        threading.Thread.start = start
        assert "ingest-cache" in started, started  # the worker ran
        assert "ingest-cache" not in [t.name for t in threading.enumerate()]  # ... and ended before open returned
        a.close()
    """)
    cache = tmp_path / "cache"
    got = _probe(call, {"TRACEINSIGHT_CACHE_DIR": str(cache), "TRACEINSIGHT_CACHE_MIN_BYTES": "0",
                        "TRACEINSIGHT_CACHE": "1"})
    assert got["after"]["threads"] == got["before"]["threads"] == ["MainThread"]
    assert [p.suffix for p in (cache / "db").iterdir()] == [".duckdb"]


def test_the_probe_sees_the_commands_tuning() -> None:
    """The same probe around `traceinsight.tuning.tune()` and the tuned analysis: it sees the changes the command's
    entry makes (so the test above could fail)."""
    call = textwrap.dedent(f"""
        import traceinsight.tuning, traceinsight.pipeline
        from pathlib import Path
        traceinsight.tuning.tune()
        traceinsight.pipeline.analyze([Path({str(SMALL)!r})])
    """)
    got = _probe(call)
    assert got["after"]["threshold_fixed"] is True
    assert got["after"]["arrow_pool"] == "system" != got["before"]["arrow_pool"]
    assert got["gc_off_during"] is True


def test_the_readmes_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's Python example, on the bundled sweep trace in place of its placeholder paths."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    code = readme.split("### From Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    code = code.replace('"trace.pt.trace.json.gz"', repr(str(SWEEP))).replace('"trace.meta.json.gz"',
                                                                           repr(str(SWEEP_META)))
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - our own README's example
    assert isinstance(scope["a"], ti.Analysis)
    assert (tmp_path / "saved").is_dir() and (tmp_path / "r.md").is_file()
