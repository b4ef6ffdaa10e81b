"""Hostile inputs and safety: decompression bombs, deep JSON nesting, megabyte names, the `sql` command's
read-only sandbox, the `.nsys-rep` export under a failing, hanging or interrupted nsys (a real shell script
standing in for nsys), and a sample of hostile files through the real CLI in a subprocess bounded in time and
memory."""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from fuzz_corpus import (
    NCU_REAL,
    NSYS_REAL,
    NsysSpec,
    _kernel_row,
    build_nsys_sqlite,
    check_bytes,
    check_input,
    dump_json,
    real_bytes,
)

from traceinsight.errors import FormatError, LimitError, QueryError, ToolMissingError
from traceinsight.ingest import limits, load, nsys_rep, nsys_sqlite, safe_sql
from traceinsight.ingest import ncu_csv as ncu_reader

REPO = Path(__file__).resolve().parents[1]
FLASHINFER_REP = NSYS_REAL.with_name("flashinfer_decode.nsys-rep")
# Address space a CLI run may take: a normal analysis of the small trace needs between 1 and 2 GB (measured
# with ulimit -v: 1 GB fails with MemoryError, 2 GB passes), most of it DuckDB's and pyarrow's reservations.
CLI_ADDRESS_SPACE = 3 << 30
CLI_TIMEOUT_S = 120


# ---------------------------------------------------------------------------------------------- helpers
@functools.cache
def _bomb_bytes(mib: int, prefix: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b" " * (64 << 20)
    return c.compress(prefix) + b"".join(c.compress(block) for _ in range(mib // 64)) + c.flush()


def bomb(path: Path, mib: int = 512, prefix: bytes = b'{"traceEvents": [], "x": "') -> int:
    """One gzip member expanding to `mib` MiB of spaces inside a JSON string, about 1000x (512 MiB from about
    500 KB by default); built once per session. Returns the decompressed size."""
    path.write_bytes(_bomb_bytes(mib, prefix))
    return len(prefix) + (mib >> 6 << 26)


def fingerprint(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def _limit_memory() -> None:  # runs in the child before exec
    resource.setrlimit(resource.RLIMIT_AS, (CLI_ADDRESS_SPACE, CLI_ADDRESS_SPACE))


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = CLI_TIMEOUT_S
) -> subprocess.CompletedProcess:
    """`python -m traceinsight ARGS` in a subprocess with at most CLI_ADDRESS_SPACE of memory and `timeout`."""
    full_env = {**os.environ, "TRACEINSIGHT_CACHE": "0", **(env or {})}
    full_env.pop("TRACEINSIGHT_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "traceinsight", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        preexec_fn=_limit_memory,
        check=False,
    )


def assert_clean_exit(proc: subprocess.CompletedProcess) -> None:
    """Exit 0, or exit 2 with exactly one stderr line; never a traceback or an internal error (exit 1)."""
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode in (0, 2), (proc.returncode, proc.stderr[-2000:])
    if proc.returncode == 2:
        lines = proc.stderr.strip("\n").split("\n")
        assert len(lines) == 1 and lines[0].startswith("traceinsight: error: "), proc.stderr


# ---------------------------------------------------------------------------------------------- limits
def _gunzip(path: Path):
    """The readers' decompressor (byte_stream.byte_chunks, which enforces limits.DecompressionBudget)."""
    from traceinsight.ingest.byte_stream import Repairs, byte_chunks

    return byte_chunks(path, Repairs())


def test_gzip_bomb_stops_at_the_ratio_limit(tmp_path: Path) -> None:
    """512 MiB from 500 KB (1000x): stopped once 256 MiB are out, by the ratio (200x), in about a second."""
    path = tmp_path / "bomb.json.gz"
    bomb(path)
    started = time.monotonic()
    with pytest.raises(LimitError) as info:
        for _ in _gunzip(path):
            pass
    assert time.monotonic() - started < 10
    msg = str(info.value)
    assert msg.startswith(f"{path}: the gzip stream expands ") and "decompression bomb" in msg and "\n" not in msg


def test_gzip_limit_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.json.gz"
    path.write_bytes(gzip.compress(b"[" + b"0," * 100_000 + b"0]", mtime=0))  # 200,003 bytes of JSON
    assert sum(len(c) for c in _gunzip(path)) == 200_003
    monkeypatch.setenv(limits.ENV_MAX_DECOMPRESSED_BYTES, "100000")
    with pytest.raises(LimitError, match=r"expands past 97\.7 KiB .*TRACEINSIGHT_MAX_DECOMPRESSED_BYTES=<bytes>"):
        list(_gunzip(path))
    monkeypatch.setenv(limits.ENV_MAX_DECOMPRESSED_BYTES, "lots")
    with pytest.raises(LimitError) as info:
        limits.max_decompressed_bytes()
    assert str(info.value) == "$TRACEINSIGHT_MAX_DECOMPRESSED_BYTES='lots' is not a number"


def test_gzip_reader_reads_members_and_reports_damage(tmp_path: Path) -> None:
    path = tmp_path / "two.json.gz"
    path.write_bytes(gzip.compress(b'{"a": ', mtime=0) + gzip.compress(b"1}", mtime=0) + b"\x00" * 64)
    assert b"".join(_gunzip(path)) == b'{"a": 1}'
    # members longer than one output chunk (16 MiB): the bytes after a member are read once (CPython leaves them
    # in both unused_data and unconsumed_tail at a member's end)
    big = zlib.compressobj(1, zlib.DEFLATED, 31)
    member = big.compress(b" " * (20 << 20)) + big.flush()
    path.write_bytes(member * 3)
    assert sum(len(c) for c in _gunzip(path)) == 3 * (20 << 20)
    path.write_bytes(gzip.compress(b'{"a": 1}' * 1000, mtime=0)[:-30])
    with pytest.raises(FormatError, match="truncated: it ends before the end-of-stream marker"):
        list(_gunzip(path))


def test_names_are_clipped_to_the_limit() -> None:
    assert limits.clip_name("abc", 64) == "abc"
    clipped = limits.clip_name("x" * 100, 64)
    assert clipped == "x" * 64 + "...[36 more characters]"
    names, n = limits.clip_names(["a" * 70, None, "b"], 64)
    assert n == 1 and names[1:] == [None, "b"] and names[0].startswith("a" * 64)


# ---------------------------------------------------------------------------------------------- nesting, names
@pytest.mark.parametrize("depth", [1025, 100_000])
def test_deep_json_nesting_is_one_line_error(depth: int) -> None:
    """orjson stops at 1024 levels; the lenient parser must not turn the rest into a RecursionError traceback."""
    data = b'{"traceEvents": [' + b"[" * depth + b"]" * depth + b"]}"
    out = check_bytes(data, "deep.json")
    assert out.kind == "error"  # check_bytes asserts the message is one line
    assert out.message.endswith("deep.json: not valid JSON: nested too deeply"), out.message


def _nsys_with_name(path: Path, name: str) -> None:
    spec = NsysSpec(rows={"StringIds": [{"id": 10, "value": name}]})
    spec.rows["CUPTI_ACTIVITY_KIND_KERNEL"] = [_kernel_row(1000, 50, 1, 10, (132, 1, 1))]
    build_nsys_sqlite(path, spec)


def test_megabyte_kernel_name_in_nsys_is_clipped(tmp_path: Path) -> None:
    path = tmp_path / "long.sqlite"
    _nsys_with_name(path, "void my_kernel<" + "int, " * 200_000 + "int>(Params)")  # 1 MB
    started = time.monotonic()
    out = check_input(path)
    assert out.kind == "ok" and time.monotonic() - started < 20
    ingest = nsys_sqlite.read(path)
    name = ingest.lists("kernels")["name"][0]
    assert len(name) == limits.DEFAULT_MAX_NAME_CHARS + len("...[934530 more characters]")
    assert "1 kernel names longer than the limit were cut (TRACEINSIGHT_MAX_NAME_CHARS)" in ingest.warnings


def test_megabyte_kernel_name_in_ncu_is_clipped(tmp_path: Path) -> None:
    text = NCU_REAL.read_text(encoding="utf-8")
    long_name = "void BatchDecodeWithPagedKVCacheKernel<" + "0, " * 350_000 + "0>(T9)"  # ~1 MB
    path = tmp_path / "long.ncu.csv"
    path.write_text(text.replace('"void BatchDecodeWithPagedKVCacheKernel<0, 2, 1, 8, 16, 8, 1, DefaultAttention<0, '
                                 '0, 0, 0>, Params>(T9)"', f'"{long_name}"', 1), encoding="utf-8")  # fmt: skip
    ingest = ncu_reader.read(path)
    assert len(ingest.tables["ncu_kernels"]["name"][0]) < limits.DEFAULT_MAX_NAME_CHARS + 64
    assert check_input(path).kind == "ok"


def test_megabyte_kernel_name_in_kineto_analyzes() -> None:
    doc = {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k" * (1 << 20), "pid": 0, "tid": 7, "ts": 1.0,
                            "dur": 2.0, "args": {"grid": [1, 1, 1]}}]}  # fmt: skip
    started = time.monotonic()
    out = check_bytes(dump_json(doc), "long.json")
    assert out.kind == "ok" and out.kernels == 1 and time.monotonic() - started < 20


# ---------------------------------------------------------------------------------------------- sql sandbox
HOSTILE_QUERIES = (
    "CREATE TABLE x AS SELECT 1",
    "DROP TABLE kernels",
    "DELETE FROM kernels",
    "INSERT INTO kernels SELECT * FROM kernels",
    "COPY (SELECT 42) TO '{input}' (FORMAT csv)",
    "COPY kernels TO '{tmp}/kernels.parquet'",
    "EXPORT DATABASE '{tmp}/export'",
    "ATTACH '{input}' AS victim",
    "ATTACH '{tmp}/new.duckdb' AS fresh",
    "INSTALL sqlite",
    "LOAD sqlite",
    "SET enable_external_access = true",
    "PRAGMA enable_profiling",
    "SELECT * FROM read_csv('{input}')",
    "SELECT * FROM read_blob('{input}')",
    "SELECT 1; DROP TABLE kernels",
    "CHECKPOINT",
)


def test_readonly_query_refuses_every_write(tmp_path: Path) -> None:
    victim = tmp_path / "victim.sqlite"
    shutil.copyfile(NSYS_REAL, victim)
    before = fingerprint(victim)
    db, _ = load([victim], cache=False)
    for template in HOSTILE_QUERIES:
        query = template.format(input=victim, tmp=tmp_path)
        with pytest.raises(QueryError) as info:
            safe_sql.readonly_query(db, query)
        assert str(info.value).startswith("SQL error: ") and "\n" not in str(info.value), query
    assert fingerprint(victim) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.sqlite"]  # nothing written beside it
    # the database the query ran against is unchanged, and reads still work
    assert db.rows("SELECT count(*) AS n FROM kernels")[0]["n"] == 70  # sqlite3: 70 kernels in the export
    names, rows = safe_sql.readonly_query(db, "SELECT count(*) AS n FROM kernels WHERE name LIKE '%Decode%'")
    assert names == ["n"] and rows[0][0] > 0


def test_readonly_query_is_stopped_after_its_timeout(tmp_path: Path) -> None:
    db, _ = load([NSYS_REAL], cache=False)
    started = time.monotonic()
    with pytest.raises(QueryError, match="did not finish within 1 s"):
        safe_sql.readonly_query(db, "SELECT count(*) FROM range(100000000000) a", timeout_s=1)
    assert time.monotonic() - started < 30


def test_sql_command_never_writes_to_its_input(tmp_path: Path) -> None:
    victim = tmp_path / "victim.sqlite"
    shutil.copyfile(NSYS_REAL, victim)
    before = fingerprint(victim)
    for query in (f"COPY (SELECT 42 AS x) TO '{victim}' (FORMAT csv)", "CREATE TABLE x AS SELECT 1",
                  f"ATTACH '{tmp_path}/new.duckdb' AS fresh"):  # fmt: skip
        proc = run_cli("sql", str(victim), query)
        assert proc.returncode == 2, (query, proc.returncode, proc.stdout[-500:], proc.stderr[-500:])
    assert fingerprint(victim) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.sqlite"]


# ---------------------------------------------------------------------------------------------- .nsys-rep export
FAKE_NSYS = """#!/bin/sh
# Stands in for Nsight Systems' nsys: `nsys export --type sqlite --force-overwrite true -o OUT REPORT`.
out=""
while [ $# -gt 0 ]; do
  if [ "$1" = "-o" ]; then out="$2"; shift; fi
  shift
done
echo $$ > "{pidfile}"
if [ -e "$out" ]; then echo "refusing: $out exists" >&2; exit 3; fi
echo "$out" > "{outfile}"
{action}
"""
ACTIONS = {
    "fail": 'echo "ERROR: the report is corrupt (fake nsys)" >&2; exit 1',
    "garbage": 'printf "SQLite format 3\\000half" > "$out"; exit 0',
    "export": 'cp "{real}" "$out"; exit 0',
    "hang": 'printf "SQLite format 3\\000partial" > "$out"; sleep 60; exit 0',
    # writes, then goes quiet (no output that a closed pipe could stop) as the same process: the pid file stays true
    "quiet": 'printf "SQLite format 3\\000partial" > "$out"; exec sleep 60',
}


@pytest.fixture
def rep_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A copy of the real .nsys-rep, a user's own file beside it, an empty cache folder."""
    report = tmp_path / "user" / "run.nsys-rep"
    report.parent.mkdir()
    shutil.copyfile(FLASHINFER_REP, report)
    mine = report.with_suffix(".sqlite")
    mine.write_text("the user's own notes, not an export")
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(cache))
    return {"report": report, "mine": mine, "cache": cache, "tmp": tmp_path}


def fake_nsys(env: dict[str, Path], action: str, monkeypatch: pytest.MonkeyPatch | None = None) -> Path:
    script = env["tmp"] / f"nsys-{action}" / "nsys"
    script.parent.mkdir(exist_ok=True)
    body = ACTIONS[action].replace("{real}", str(NSYS_REAL))
    script.write_text(
        FAKE_NSYS.replace("{pidfile}", str(env["tmp"] / "nsys.pid"))
        .replace("{outfile}", str(env["tmp"] / "nsys.out"))
        .replace("{action}", body)
    )
    script.chmod(0o755)
    if monkeypatch is not None:
        monkeypatch.setenv("NSYS", str(script))
    return script


def _leftovers(cache: Path) -> list[str]:
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()) if cache.exists() else []


def _dead(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_rep_export_failing_nsys(rep_env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nsys(rep_env, "fail", monkeypatch)
    before = fingerprint(rep_env["mine"])
    with pytest.raises(FormatError) as info:
        nsys_rep.export(rep_env["report"])
    assert str(info.value) == f"{rep_env['report']}: `nsys export` failed: ERROR: the report is corrupt (fake nsys)"
    assert _leftovers(rep_env["cache"]) == [] and fingerprint(rep_env["mine"]) == before


def test_rep_export_writing_garbage(rep_env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nsys(rep_env, "garbage", monkeypatch)
    with pytest.raises(FormatError, match="`nsys export` produced no usable SQLite export"):
        nsys_rep.export(rep_env["report"])
    assert _leftovers(rep_env["cache"]) == []


def test_rep_export_never_overwrites_a_file_it_did_not_create(
    rep_env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """nsys is pointed at a fresh temporary name in the cache (the fake refuses an existing one), the user's
    `run.sqlite` beside the report is untouched, and the export lands in the cache, renamed into place."""
    fake_nsys(rep_env, "export", monkeypatch)
    before = fingerprint(rep_env["mine"]), fingerprint(rep_env["report"])
    exported = nsys_rep.export(rep_env["report"])
    told = Path((rep_env["tmp"] / "nsys.out").read_text().strip())
    assert told.parent == exported.parent == rep_env["cache"] / "nsys" and told.name.endswith(".tmp.sqlite")
    assert not told.exists() and exported.read_bytes() == real_bytes(NSYS_REAL)
    assert (fingerprint(rep_env["mine"]), fingerprint(rep_env["report"])) == before
    assert _leftovers(rep_env["cache"]) == [f"nsys/{exported.name}"]


def test_rep_export_timeout_kills_nsys(rep_env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nsys(rep_env, "hang", monkeypatch)
    started = time.monotonic()
    with pytest.raises(FormatError, match=r"`nsys export` did not finish within 1 s"):
        nsys_rep.export(rep_env["report"], timeout_s=1)
    assert time.monotonic() - started < 15
    assert _dead(int((rep_env["tmp"] / "nsys.pid").read_text()))
    assert _leftovers(rep_env["cache"]) == []


def _signal_masks(pid: int) -> str:
    """The Sig* lines of /proc/PID/status (blocked, ignored, caught), for a failure message."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "(gone)"
    return ", ".join(ln.replace("\t", " ") for ln in lines if ln.startswith(("SigBlk", "SigIgn", "SigCgt", "State")))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_rep_export_interrupted_leaves_nothing(rep_env: dict[str, Path], sig: signal.Signals) -> None:
    """The CLI, killed while nsys is writing: nsys is killed too and its partial output removed."""
    script = fake_nsys(rep_env, "hang")
    env = {
        **os.environ,
        "TRACEINSIGHT_CACHE": "0",
        "TRACEINSIGHT_CACHE_DIR": str(rep_env["cache"]),
        "NSYS": str(script),
    }
    # SIGINT as a terminal's Ctrl-C finds a foreground command: handled. A command started as a background job of a
    # non-interactive shell (`pytest ... &` in a script) inherits SIGINT ignored, so would never see it.
    proc = subprocess.Popen(
        [sys.executable, "-m", "traceinsight", "analyze", str(rep_env["report"])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        pidfile = rep_env["tmp"] / "nsys.pid"
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        nsys_pid = int(pidfile.read_text())
        partial = Path((rep_env["tmp"] / "nsys.out").read_text().strip())
        while not partial.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert partial.exists()  # nsys has begun writing
        masks = _signal_masks(proc.pid)
        proc.send_signal(sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running 30 s after {sig.name}; its signal masks before: {masks}; now: "
                        f"{_signal_masks(proc.pid)}; parent's {sig.name} handler: {signal.getsignal(sig)!r}")
    finally:
        proc.kill()
        _, stderr = proc.communicate()
    # docs/ERRORS.md: Ctrl-C ends with one line and 130 (seen on the H200 machine with the real nsys: click's
    # "Aborted!" and status 1 before); SIGTERM ends the process as the signal does.
    if sig == signal.SIGINT:
        assert (proc.returncode, stderr) == (130, b"traceinsight: error: interrupted\n")
    else:
        assert proc.returncode == -sig and b"Traceback" not in stderr
    assert _dead(nsys_pid)
    assert _leftovers(rep_env["cache"]) == []


@pytest.mark.skipif(sys.platform != "linux", reason="the kernel's parent-death signal is Linux's")
def test_rep_export_sigkilled_cli_takes_nsys_along(rep_env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI SIGKILLed while nsys exports: nothing in traceinsight can run, and nsys is in its own session,
    yet it must not run on (it did, until its next progress line hit the closed pipe, with the real nsys on the
    H200 machine: tests/data/nsys_real/README.md). Its partial output stays under our temporary name; the next
    export removes it and lands alone in the cache."""
    script = fake_nsys(rep_env, "quiet")
    env = {**os.environ, "TRACEINSIGHT_CACHE": "0", "TRACEINSIGHT_CACHE_DIR": str(rep_env["cache"])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "traceinsight", "analyze", str(rep_env["report"])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**env, "NSYS": str(script)},
    )  # fmt: skip
    pidfile = rep_env["tmp"] / "nsys.pid"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the stand-in has written and become the quiet `sleep`
            with contextlib.suppress(OSError, ValueError):
                if b"sleep" in Path(f"/proc/{int(pidfile.read_text())}/cmdline").read_bytes():
                    break
            time.sleep(0.02)
        nsys_pid = int(pidfile.read_text())
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    assert _dead(nsys_pid), "nsys outlived the SIGKILLed traceinsight"
    partial = Path((rep_env["tmp"] / "nsys.out").read_text().strip())
    assert nsys_rep._TMP_NAME.match(partial.name) and _leftovers(rep_env["cache"]) == [f"nsys/{partial.name}"]
    fake_nsys(rep_env, "export", monkeypatch)
    exported = nsys_rep.export(rep_env["report"])
    assert _leftovers(rep_env["cache"]) == [f"nsys/{exported.name}"]
    assert sorted(p.name for p in rep_env["report"].parent.iterdir()) == ["run.nsys-rep", "run.sqlite"]


def test_stale_temporaries_of_dead_processes_are_removed(
    rep_env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = rep_env["cache"] / "nsys"
    folder.mkdir(parents=True)
    dead = subprocess.run(["true"], check=True)  # a pid that has exited
    del dead
    stale = folder / ".run-0123456789abcdef-82828.999999999-deadbeef.tmp.sqlite"
    stale.write_bytes(b"partial")
    foreign = folder / "notes.txt"
    foreign.write_text("not ours")
    fake_nsys(rep_env, "fail", monkeypatch)
    with pytest.raises(FormatError):
        nsys_rep.export(rep_env["report"])
    assert not stale.exists() and foreign.exists()


def test_rep_with_nsys_that_cannot_run(rep_env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    script = rep_env["tmp"] / "bin" / "nsys"
    script.parent.mkdir()
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    monkeypatch.setenv("NSYS", str(script))
    with pytest.raises(ToolMissingError, match="cannot run"):
        nsys_rep.export(rep_env["report"])
    assert _leftovers(rep_env["cache"]) == []


# ---------------------------------------------------------------------------------------------- the CLI
def _hostile_files(tmp: Path) -> list[Path]:
    files = []

    def put(name: str, data: bytes) -> None:
        (tmp / name).write_bytes(data)
        files.append(tmp / name)

    put("empty.json", b"")
    put("garbage.bin", bytes(range(256)) * 64)
    put("deep.json", b'{"traceEvents": [' + b"[" * 50_000 + b"]" * 50_000 + b"]}")
    put("nan.json", b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": NaN, "dur": Infinity}]}')
    put("notutf8.json", b'{"traceEvents": [{"name": "\xff\xfe"}]}')
    put("cut.pt.trace.json.gz", real_bytes(NSYS_REAL.with_name("flashinfer_decode_small.pt.trace.json.gz"))[:30_000])
    put("cut.sqlite", real_bytes(NSYS_REAL)[: 40 * 4096])
    put("zeros.sqlite", b"SQLite format 3\x00" + bytes(8192))
    put("cut.ncu.csv", real_bytes(NCU_REAL)[:20_000])
    (tmp / "a-directory").mkdir()
    files += [tmp / "a-directory", tmp / "missing.json"]
    return files


def test_cli_on_hostile_files(tmp_path: Path) -> None:
    """Each through `traceinsight analyze` (and `--format json`) in a subprocess: exit 0 or 2 with one line,
    within CLI_TIMEOUT_S and CLI_ADDRESS_SPACE."""
    failures = []
    for path in _hostile_files(tmp_path):
        for extra in ([], ["--format", "json"]):
            proc = run_cli("analyze", str(path), *extra, env={"TRACEINSIGHT_CACHE_DIR": str(tmp_path / "cache")})
            try:
                assert_clean_exit(proc)
            except AssertionError as exc:
                failures.append(f"{path.name} {extra}: {exc}")
    assert not failures, "\n".join(failures)
    proc = run_cli("sql", str(NSYS_REAL), "SELECT count(*) AS n FROM kernels", "--format", "csv")
    assert proc.returncode == 0 and proc.stdout.split() == ["n", "70"]  # sqlite3: 70 kernels


def test_cli_on_a_gzip_bomb(tmp_path: Path) -> None:
    """512 MiB of blanks inside traceEvents from ~500 KB: stopped by the ratio limit after 256 MiB, one line."""
    path = tmp_path / "bomb.json.gz"
    bomb(path, prefix=b'{"traceEvents": [')
    started = time.monotonic()
    proc = run_cli("analyze", str(path))
    assert_clean_exit(proc)
    assert proc.returncode == 2 and "a decompression bomb, not a trace" in proc.stderr, proc.stderr
    assert time.monotonic() - started < 60


def test_cli_on_a_multi_member_gzip_trace(tmp_path: Path) -> None:
    """The 2021 ResNet-50 trace (35 MB of JSON; 8772 kernels, counted with json.load on the zcat output)
    recompressed as two gzip members, as `cat a.gz b.gz` or bgzip-style writers produce. (Found by this suite: the
    streaming reader re-read the bytes after a member, which CPython leaves in both unused_data and
    unconsumed_tail, and never finished.)"""
    src = NSYS_REAL.parents[1] / "foreign" / "kineto_tbplugin_v100_resnet50_worker0.1623143089861.pt.trace.json.gz"
    text = gzip.decompress(src.read_bytes())
    path = tmp_path / "two-members.pt.trace.json.gz"
    half = len(text) // 2
    path.write_bytes(gzip.compress(text[:half], 1, mtime=0) + gzip.compress(text[half:], 1, mtime=0))
    proc = run_cli("sql", str(path), "SELECT count(*) AS n FROM kernels", "--format", "csv", timeout=60)
    assert_clean_exit(proc)
    assert proc.stdout.split() == ["n", "8772"]


# ---------------------------------------------------------------------------------------------- docs/ERRORS.md
# Every reader module: a split of one cannot leave its messages out of the check.
DOCUMENTED_MODULES = sorted(p.stem for p in (REPO / "traceinsight" / "ingest").glob("*.py"))


def _message_literals(module: Path) -> list[tuple[int, str]]:
    """(line, longest literal piece) of the message of every `raise <Something>Error(...)` in `module`."""
    import ast

    out = []
    for node in ast.walk(ast.parse(module.read_text())):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
            continue
        name = getattr(node.exc.func, "id", getattr(node.exc.func, "attr", ""))
        if name not in ("InputError", "FormatError", "LimitError", "ToolMissingError", "QueryError"):
            continue
        arg = node.exc.args[0]
        parts = arg.values if isinstance(arg, ast.JoinedStr) else [arg]
        pieces = [p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str)]
        longest = max((p.strip(" :;,()") for p in pieces), key=len, default="")
        if len(longest) >= 12:
            out.append((node.lineno, longest))
    return out


def test_every_reader_error_is_in_the_errors_page() -> None:
    """Each fixed piece of text of a reader's error messages appears in docs/ERRORS.md."""
    doc = (REPO / "docs" / "ERRORS.md").read_text()
    missing = [
        f"{name}.py:{line}: {text!r}"
        for name in DOCUMENTED_MODULES
        for line, text in _message_literals(REPO / "traceinsight" / "ingest" / f"{name}.py")
        if text not in doc
    ]
    assert not missing, "\n".join(missing)
    for cls in ("InputError", "FormatError", "LimitError", "ToolMissingError", "QueryError", "UnknownGPUError"):
        assert f"`{cls}`" in doc
