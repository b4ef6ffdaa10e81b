"""`traceinsight analyze REPORT.nsys-rep` against what the real Nsight Systems made and did on the H200 machine.

tests/data/nsys_real (README.md there): a real report of a small decode-attention workload captured with nsys
2025.3.1 on the H200 machine, and the SQLite export that traceinsight's own `nsys export` wrote into its cache
there. What the device run showed and these tests hold:

- the report analyzed through the cached export reads to the same analysis as the export itself, and a second
  run reuses the cache entry (not rewritten) — here without nsys, from the committed export in the cache folder;
- a damaged report makes the real nsys fail with `Exportation error: ...` (kept below, per damage); traceinsight
  prints that as one line and exits 2, leaves the report as it was and nothing in the cache, although nsys itself
  leaves a partial SQLite file behind on some failures;
- a partial or left-over export is never read as the cache entry: the report is exported again.
- SIGINT, SIGTERM or SIGKILL while nsys exports a large report (README.md there: 42 MB, a 7 s export; not
  committed, made by capture/big.sh): nsys is gone within a second, the run ends as docs/ERRORS.md says, nothing is
  written beside the report, and the next run gives the same analysis as a separate export.

Tests that need the real `nsys` skip when none is found (this CI has none); run them on a machine with Nsight
Systems 2025.3 or newer (older nsys cannot read this report).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import sha256

from traceinsight.ingest import load, nsys_rep, nsys_sqlite

DATA = Path(__file__).parent / "data" / "nsys_real"
REP = DATA / "h200_torch_decode.nsys-rep"
EXPORT = DATA / "h200_torch_decode.sqlite"
# sha256sum on the H200 machine: 31c47b71c5bcc5d19c6e1dd1...  104437 bytes; the cache name nsys_rep gave it there.
CACHE_NAME = "h200_torch_decode-31c47b71c5bcc5d1-104437.sqlite"

# What nsys 2025.3.1 printed on the H200 machine for `nsys export --type sqlite` of damaged copies (exit status 1):
REAL_NSYS_FAILURES = {
    "truncated": "Exportation error: Section Table Reference magic number mismatch.",  # first half of the report
    "flipped": "Exportation error: LZ4 decompression failed.",  # 4096 bytes inverted in the middle
}
# Its failed export of the flipped copy still left an 81920-byte `-o` file (none for the truncated copy).
NSYS_PARTIAL_BYTES = 81920
ERROR_LINE = re.compile(r"^traceinsight: error: .+: `nsys export` failed: Exportation error: [^\n]+\n$")

needs_nsys = pytest.mark.skipif(
    nsys_rep.find_nsys() is None,
    reason="Nsight Systems `nsys` not found (PATH, $NSYS, "
    "/opt/nvidia); the real-nsys cases ran on the H200 machine (tests/data/nsys_real)",
)


def _damaged(kind: str, folder: Path) -> Path:
    data = bytearray(REP.read_bytes())
    if kind == "truncated":
        data = data[: len(data) // 2]
    else:
        mid = len(data) // 2
        data[mid : mid + 4096] = bytes(b ^ 0xFF for b in data[mid : mid + 4096])
    out = folder / f"{kind}.nsys-rep"
    out.write_bytes(bytes(data))
    return out


def _analyze(path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceinsight", "analyze", str(path), *args],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


def _analysis(stdout: str) -> dict:
    """The JSON analysis without what names the input file (its path and whether it was the report or export)."""
    doc = json.loads(stdout)
    for part in (doc["trace"], doc["summary"]):
        for key in ("path", "format", "trace"):
            part.pop(key, None)
    return doc


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The CLI's environment: an empty cache folder; nsys as this machine has it (or not)."""
    return {**os.environ, "TRACEINSIGHT_CACHE_DIR": str(tmp_path / "cache")}


@pytest.fixture
def no_nsys_env(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    out = {**env, "PATH": str(empty)}
    out.pop("NSYS", None)
    return out


def _cache_entry(env: dict[str, str]) -> Path:
    return Path(env["TRACEINSIGHT_CACHE_DIR"]) / "nsys" / CACHE_NAME


# -------------------------------------------------------------------------------- the committed files, no nsys
def test_committed_export_is_nsys_2025_3_sqlite() -> None:
    con = nsys_sqlite.connect(EXPORT)
    try:
        meta = dict(con.execute("SELECT name, value FROM META_DATA_EXPORT").fetchall())
    finally:
        con.close()
    # `nsys --version` said 2025.3.1.0; the export names the exporter's own build.
    assert (meta["EXPORT_PRODUCT_VERSION"], meta["EXPORT_SCHEMA_VERSION"]) == ("2025.3.2.0", "3.20.3")
    assert nsys_rep._is_nsys_sqlite(EXPORT)


def test_cache_name_is_the_one_the_device_used(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", env["TRACEINSIGHT_CACHE_DIR"])
    assert nsys_rep.cached_export_path(REP) == _cache_entry(env)


def test_report_through_cached_export_reads_as_the_export(no_nsys_env: dict[str, str]) -> None:
    entry = _cache_entry(no_nsys_env)
    entry.parent.mkdir(parents=True)
    shutil.copyfile(EXPORT, entry)
    os.utime(entry, (1_000_000_000, 1_000_000_000))
    before = sha256(REP)
    via_rep = _analyze(REP, no_nsys_env, "--format", "json")
    direct = _analyze(EXPORT, no_nsys_env, "--format", "json")
    assert (via_rep.returncode, via_rep.stderr, direct.returncode, direct.stderr) == (0, "", 0, "")
    rep_doc = json.loads(via_rep.stdout)
    assert (rep_doc["trace"]["format"], rep_doc["trace"]["path"]) == ("nsys-rep", str(REP))
    assert _analysis(via_rep.stdout) == _analysis(direct.stdout)
    # What the H200 run printed for this report (analyze --format json, summary).
    s = rep_doc["summary"]
    assert (s["gpu"], s["kernels"], s["kernel_ns"], s["steps"]) == ("NVIDIA H200", 37, 275935, 6)
    assert rep_doc["trace"]["tool_version"] == "nsys 2025.3.2.0"
    # Reused, not rewritten; the report untouched; nothing else in the cache.
    assert entry.stat().st_mtime == 1_000_000_000
    assert sha256(REP) == before
    assert sorted(p.name for p in entry.parent.iterdir()) == [CACHE_NAME]


@pytest.mark.parametrize("leftover", ["partial-entry", "temporary-of-dead-run"])
def test_partial_or_leftover_export_is_not_read(leftover: str, no_nsys_env: dict[str, str]) -> None:
    """An interrupted export can leave the head of an export where the entry goes (nsys's own partial output
    is 81920 bytes of it) or a complete export under our temporary name: neither is read as the report."""
    if nsys_rep.find_nsys() is not None:
        pytest.skip("nsys is installed: the report would be exported afresh instead of failing")
    entry = _cache_entry(no_nsys_env)
    entry.parent.mkdir(parents=True)
    if leftover == "partial-entry":
        entry.write_bytes(EXPORT.read_bytes()[:NSYS_PARTIAL_BYTES])
        left = entry
    else:  # a run SIGKILLed between nsys's end and the rename: pid 999999999 is no live process
        left = entry.with_name(f".{entry.stem}.999999999-0123abcd.tmp.sqlite")
        shutil.copyfile(EXPORT, left)
    done = _analyze(REP, no_nsys_env, "--format", "json")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"traceinsight: error: {REP}: reading an .nsys-rep needs Nsight Systems' `nsys`")
    assert done.stderr.count("\n") == 1
    assert left.exists()  # without nsys nothing is exported, so nothing is cleaned up either
    with pytest.raises(Exception, match="needs Nsight Systems"):
        load([REP])


@pytest.mark.parametrize("kind", sorted(REAL_NSYS_FAILURES))
def test_damaged_report_replaying_the_real_nsys(kind: str, env: dict[str, str], tmp_path: Path) -> None:
    """nsys 2025.3.1's recorded answer to a damaged report, replayed: its message on stderr, exit status 1 and,
    for the flipped copy, the partial export it left. One line and 2 from traceinsight, nothing cached."""
    damaged = _damaged(kind, tmp_path)
    before = sha256(damaged)
    replay = tmp_path / "bin" / "nsys"
    replay.parent.mkdir()
    partial = f'head -c {NSYS_PARTIAL_BYTES} "{EXPORT}" > "$out"; ' if kind == "flipped" else ""
    replay.write_text(
        '#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done\n'
        f'{partial}echo "{REAL_NSYS_FAILURES[kind]}" >&2; echo >&2; exit 1\n'
    )
    replay.chmod(0o755)
    done = _analyze(damaged, {**env, "NSYS": str(replay)}, "--format", "json")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"traceinsight: error: {damaged}: `nsys export` failed: {REAL_NSYS_FAILURES[kind]}\n"
    assert ERROR_LINE.match(done.stderr)
    assert sha256(damaged) == before
    assert list((Path(env["TRACEINSIGHT_CACHE_DIR"]) / "nsys").iterdir()) == []


# ------------------------------------------------------------------------------------------- with the real nsys
@needs_nsys
def test_real_export_then_reuse(env: dict[str, str]) -> None:
    before = sha256(REP)
    first = _analyze(REP, env, "--format", "json")
    assert (first.returncode, first.stderr) == (0, "")
    entry = _cache_entry(env)
    assert sorted(p.name for p in entry.parent.iterdir()) == [CACHE_NAME]
    mtime = entry.stat().st_mtime_ns
    second = _analyze(REP, env, "--format", "json")
    assert (second.returncode, second.stdout) == (0, first.stdout)
    assert entry.stat().st_mtime_ns == mtime  # reused, no second export
    assert _analysis(first.stdout) == _analysis(_analyze(EXPORT, env, "--format", "json").stdout)
    assert sha256(REP) == before


@needs_nsys
@pytest.mark.parametrize("kind", sorted(REAL_NSYS_FAILURES))
def test_real_nsys_on_damaged_report(kind: str, env: dict[str, str], tmp_path: Path) -> None:
    damaged = _damaged(kind, tmp_path)
    before = sha256(damaged)
    done = _analyze(damaged, env, "--format", "json")
    assert (done.returncode, done.stdout) == (2, "")
    assert ERROR_LINE.match(done.stderr), done.stderr  # nsys's own words vary by version; the shape does not
    assert sha256(damaged) == before
    assert list((Path(env["TRACEINSIGHT_CACHE_DIR"]) / "nsys").iterdir()) == []


# A report whose `nsys export` takes seconds, so that a signal lands while nsys is exporting (the committed one
# exports in well under a second). Too large to commit: capture/big.sh makes it on a GPU machine with nsys
# (README.md, "Interrupted during `nsys export`"); point $TRACEINSIGHT_BIG_NSYS_REP at it, or put it here.
BIG_REP = Path(os.environ.get("TRACEINSIGHT_BIG_NSYS_REP") or DATA / "big.nsys-rep")
SLOW_EXPORT_S = 1.0  # the signal is sent this long after nsys started (nsys must still be running then)


def _procs() -> dict[int, tuple[int, int, str]]:
    """Linux: every live process's pid -> (parent pid, session id, state)."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                rest = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            out[int(d.name)] = (int(rest[1]), int(rest[3]), rest[0])
    return out


def _nsys_of(pid: int) -> list[int]:
    """The live processes of the session of `pid`'s child (nsys runs in its own session), child first."""
    procs = _procs()
    kids = [p for p, (ppid, _, state) in procs.items() if ppid == pid and state not in "ZX"]
    if not kids:
        return []
    return [
        kids[0],
        *(p for p, (_, sid, state) in procs.items() if sid == kids[0] and p != kids[0] and state not in "ZX"),
    ]


def _alive(pids: list[int]) -> list[int]:
    procs = _procs()
    return [p for p in pids if p in procs and procs[p][2] not in "ZX"]


@pytest.fixture(scope="module")
def big_analysis(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The analysis of a separate, uninterrupted `nsys export` of the large report."""
    if nsys_rep.find_nsys() is None:
        pytest.skip("Nsight Systems `nsys` not found (PATH, $NSYS, /opt/nvidia)")
    if not BIG_REP.is_file():
        pytest.skip(
            f"no report large enough to interrupt `nsys export` at {BIG_REP}: make one with "
            "tests/data/nsys_real/capture/big.sh on a GPU machine with nsys (README.md there), put it there or set "
            "$TRACEINSIGHT_BIG_NSYS_REP to it"
        )
    out = tmp_path_factory.mktemp("big") / "direct.sqlite"
    nsys = str(nsys_rep.find_nsys())
    subprocess.run(
        [nsys, "export", "--type", "sqlite", "-o", str(out), str(BIG_REP)], check=True, capture_output=True, timeout=600
    )
    env = {**os.environ, "TRACEINSIGHT_CACHE_DIR": str(out.parent / "cache")}
    done = _analyze(out, env, "--format", "json")
    assert (done.returncode, done.stderr) == (0, "")
    return _analysis(done.stdout)


@needs_nsys
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="watches nsys through /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_real_export_interrupted_then_recovers(
    sig: signal.Signals, big_analysis: dict, tmp_path: Path, env: dict[str, str]
) -> None:
    """A signal to `traceinsight analyze` while the real nsys exports the large report: nsys is gone within
    seconds (SIGKILL included), the run ends as docs/ERRORS.md says, nothing is written beside the report, and
    the next run exports again and gives the same analysis as a separate export."""
    report = tmp_path / "user" / BIG_REP.name
    report.parent.mkdir()
    shutil.copyfile(BIG_REP, report)
    before = sha256(report)
    folder = Path(env["TRACEINSIGHT_CACHE_DIR"]) / "nsys"
    proc = subprocess.Popen(
        [sys.executable, "-m", "traceinsight", "analyze", str(report), "--format", "json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (nsys := _nsys_of(proc.pid)) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert nsys, "nsys never started"
        time.sleep(SLOW_EXPORT_S)
        assert _alive(nsys[:1]) and proc.poll() is None, (
            f"`nsys export` of {BIG_REP} ended within {SLOW_EXPORT_S} s: take a larger report"
        )
        nsys = _nsys_of(proc.pid) or nsys  # and whatever it started by now
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    if sig == signal.SIGINT:
        assert (proc.returncode, err) == (130, b"traceinsight: error: interrupted\n")
    else:
        assert (proc.returncode, err) == (-sig, b"")
    gone_by = time.monotonic() + 10
    while _alive(nsys) and time.monotonic() < gone_by:
        time.sleep(0.01)
    assert not _alive(nsys), f"nsys still running after traceinsight got {sig.name}"
    left = [p.name for p in folder.iterdir()] if folder.is_dir() else []
    # Ctrl-C and SIGTERM remove the partial export; SIGKILL cannot, and leaves only our temporary name.
    assert all(nsys_rep._TMP_NAME.match(n) for n in left) and (sig == signal.SIGKILL or not left), left
    assert [p.name for p in report.parent.iterdir()] == [report.name] and sha256(report) == before
    again = _analyze(report, env, "--format", "json")
    assert (again.returncode, again.stderr) == (0, "")
    assert _analysis(again.stdout) == big_analysis
    names = [p.name for p in folder.iterdir()]
    assert len(names) == 1 and names[0].endswith(f"-{nsys_rep.report_key(report)}.sqlite"), names
