"""Issue 14 items 3-4: warnings on stderr whatever the format, inputs that do not fit said so, report files with
the user's umask, and a dashboard whose Streamlit child ends with it. Real traces, real processes."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SMALL = REPO / "examples" / "h200" / "flashinfer_decode_small.pt.trace.json.gz"
SWEEP = REPO / "examples" / "h200" / "flashinfer_decode_sweep.pt.trace.json.gz"
SWEEP_META = REPO / "examples" / "h200" / "flashinfer_decode_sweep.meta.json.gz"
TRACELENS = REPO.parent / "shared" / "traces" / "foreign" / "tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


def _run(*args: str, umask: int | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "traceinsight", *args], env=env, capture_output=True, text=True,
                          cwd=cwd, preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)  # noqa: PLW1509


def test_a_cut_file_warns_on_stderr_with_json(tmp_path: Path) -> None:
    """With --format json the cut-file warning was only inside the document; now it is on stderr too, and stdout
    is still one JSON document."""
    cut = tmp_path / "cut.pt.trace.json"
    cut.write_bytes(gzip.decompress(SMALL.read_bytes())[:300_000])
    for fmt in ("json", "text"):
        r = _run("analyze", str(cut), "--format", fmt)
        assert r.returncode == 0, r.stderr
        assert "traceinsight: warning: " in r.stderr and "file cut short?" in r.stderr, r.stderr
        if fmt == "json":
            assert any("file cut short" in w for w in json.loads(r.stdout)["trace"]["warnings"])
        else:
            assert "file cut short" not in r.stdout  # said once, on stderr


def test_a_sidecar_that_matches_no_step_warns() -> None:
    r = _run("analyze", str(TRACELENS), "--meta", str(SWEEP_META), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert f"the sidecar {SWEEP_META} matches none of the one step (named like 'ProfilerStep#6')" in r.stderr
    # A sidecar that matches stays quiet.
    r = _run("analyze", str(SWEEP), "--meta", str(SWEEP_META), "--format", "json")
    assert "matches none" not in r.stderr


def test_an_input_given_twice_warns_and_is_read_once(tmp_path: Path) -> None:
    """The trace given as its own sidecar doubled every count (96 kernels for 48)."""
    r = _run("analyze", str(SMALL), "--meta", str(SMALL), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert "is given twice (as a trace and with --meta): read once" in r.stderr
    doc = json.loads(r.stdout)
    assert sum(k["count"] for k in doc["kernels"]) == 48
    r = _run("analyze", "examples/h200/flashinfer_decode_small.pt.trace.json.gz",
             "./examples/h200/flashinfer_decode_small.pt.trace.json.gz", "--format", "json", cwd=REPO)
    assert "./examples/h200/flashinfer_decode_small.pt.trace.json.gz is given twice: read once" in r.stderr
    assert json.loads(r.stdout)["schema"] == "traceinsight.analysis/1"  # one trace, not a fleet of two


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_report_files_get_the_users_umask(tmp_path: Path, umask: int, mode: int) -> None:
    """Report files were written 0600 whatever the umask (the temporary file's mode)."""
    for fmt in ("html", "md", "json", "text"):
        out = tmp_path / f"report-{umask:o}.{fmt}"
        r = _run("analyze", str(SMALL), "--format", fmt, "--out", str(out), umask=umask)
        assert r.returncode == 0, r.stderr
        assert stat.S_IMODE(out.stat().st_mode) == mode, fmt


def test_dashboard_sources_find_the_sidecar_beside_the_first_trace() -> None:
    sys.path.insert(0, str(REPO / "dashboards"))
    try:
        import sources
    finally:
        sys.path.pop(0)
    (src,) = sources.from_args([str(SWEEP)])
    assert src.meta == (SWEEP_META,)  # the first trace took none unless one was given
    (src,) = sources.from_args([str(TRACELENS)], [str(SWEEP_META)])
    assert src.meta == (SWEEP_META,)
    from traceinsight.cli.dashboard import META_ENV, streamlit_command

    _, env = streamlit_command([SWEEP], None, "127.0.0.1", 10, True, [SWEEP_META])
    assert env[META_ENV] == str(SWEEP_META.resolve())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - localhost only
            return True
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killing_the_dashboard_command_stops_streamlit(tmp_path: Path, sig: signal.Signals) -> None:
    """`kill` of `traceinsight dashboard` left Streamlit serving. Now SIGTERM is passed on to it, and on Linux
    the kernel stops it when its parent dies even by SIGKILL."""
    pytest.importorskip("streamlit")
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "traceinsight", "dashboard", str(SMALL), "--port", str(port), "--host",
           "127.0.0.1", "--headless"]
    log = open(tmp_path / "dashboard.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/_stcore/health"
    try:
        deadline = time.monotonic() + 90
        while not _answers(url):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "dashboard.log").read_text()
            time.sleep(0.3)
        os.kill(proc.pid, sig)  # the command only, as `kill PID` does
        proc.wait(timeout=15)
        deadline = time.monotonic() + 15
        while _answers(url) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not _answers(url), "Streamlit still serving after the dashboard command ended"
        if sig == signal.SIGTERM:
            assert proc.returncode == 128 + signal.SIGTERM
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.close()


def test_profiler_steps_when_nothing_else_annotates() -> None:
    """TraceLens' Qwen trace has no annotation but torch.profiler's ProfilerStep#6: it was 34 steps, one per
    attention kernel; now the profiler's step is the step (the 10 launches outside it are counted apart)."""
    from traceinsight.pipeline import analyze

    _, (a,) = analyze([TRACELENS], cache=False)
    assert [s.name for s in a.steps] == ["ProfilerStep#6"]
    assert len(a.steps[0].launches) == 24 and a.extra["unassigned_launches"]["count"] == 10
    assert a.extra["steps_from"].startswith("torch.profiler's ProfilerStep#N")
    # An annotated trace keeps its own ranges, and --step-pattern still decides when given.
    _, (small,) = analyze([SMALL], cache=False)
    assert all(s.name.startswith("decode_step ") for s in small.steps)
    assert small.extra["steps_from"] == "the annotation ranges around the attention launches"
    _, (b,) = analyze([TRACELENS], step_pattern="^nothing$", cache=False)
    assert all(s.source.startswith("launch") for s in b.steps)
