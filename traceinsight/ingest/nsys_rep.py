""".nsys-rep reports: converted to SQLite with the user's own `nsys export`, and the export cached.

The export lands in a cache folder (`$TRACEINSIGHT_CACHE_DIR`, else `$XDG_CACHE_HOME/traceinsight`, else
`~/.cache/traceinsight`) under `nsys/`, named by the report's content (sha256 prefix and size), so a report is
exported once and a changed report is exported again. nsys writes to a temporary name in that folder which is
renamed into place only once the export succeeded: a failed, interrupted or timed-out export leaves nothing
behind, and nothing beside the user's report is ever written.

Interruption: Ctrl-C (SIGINT), SIGTERM and SIGHUP during an export kill nsys, remove its partial output, and
then end traceinsight as the signal would have. A process killed outright (SIGKILL) cannot clean up: on Linux
the kernel then kills nsys too (it runs in its own session, so nothing else would stop it), and the next export
removes temporary files whose owning process is gone.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

from traceinsight.errors import FormatError, InputError, ToolMissingError
from traceinsight.ingest.nsys_sqlite import connect

# Longest an export may run (s); large reports take minutes.
EXPORT_TIMEOUT_S = 600.0

# Where Nsight Systems installs itself (standalone, CLI-only, inside the CUDA toolkit, bundled with Nsight
# Compute), searched after $NSYS and PATH; the newest version found wins since old nsys cannot read new reports.
INSTALL_GLOBS = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems/*/target-linux-*/nsys",
    "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
    "/opt/nvidia/nsight-systems-cli/*/target-linux-*/nsys",
    "/usr/local/cuda*/NsightSystems-cli-*/bin/nsys",
    "/usr/local/cuda*/NsightSystems-cli-*/target-linux-*/nsys",
    "/usr/local/cuda*/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-*/nsys",
)

# Signals that end an export early: nsys is killed and its partial output removed before traceinsight ends.
INTERRUPT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
# Our temporary export names: `.{stem}.{pid}-{8 hex}.tmp.sqlite` (+ SQLite's -journal/-wal/-shm beside it).
_TMP_NAME = re.compile(r"^\..*\.(\d+)-[0-9a-f]{8}\.tmp\.sqlite(?:-journal|-wal|-shm)?$")

_NSYS_VERSION = re.compile(r"(20\d\d)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?")
_CUDA_VERSION = re.compile(r"cuda-(\d+)\.(\d+)")


def cache_dir() -> Path:
    """The folder holding traceinsight's caches (created on first write, not here)."""
    if os.environ.get("TRACEINSIGHT_CACHE_DIR"):
        return Path(os.environ["TRACEINSIGHT_CACHE_DIR"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "traceinsight"
    return Path.home() / ".cache" / "traceinsight"


def _executable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def _install_key(p: str) -> tuple[int, ...]:
    m = _NSYS_VERSION.search(p)
    if m:
        return (2, *(int(g or 0) for g in m.groups()))
    m = _CUDA_VERSION.search(p)
    return (1, int(m.group(1)), int(m.group(2))) if m else (0,)


def find_nsys() -> Path | None:
    """The nsys to run: $NSYS (a binary, or a folder holding one), else `nsys` on PATH, else the newest in
    the usual install folders. None when there is none. A $NSYS that names nothing runnable is an error."""
    env = os.environ.get("NSYS")
    if env:
        p = Path(env).expanduser()
        if p.is_dir():
            p = p / "nsys"
        if not _executable(p):
            raise ToolMissingError(f"$NSYS={env} is not a runnable `nsys`; point $NSYS at the nsys binary or unset it")
        return p
    on_path = shutil.which("nsys")
    if on_path:
        return Path(on_path)
    found = sorted({f for pattern in INSTALL_GLOBS for f in glob.glob(pattern)}, key=_install_key, reverse=True)
    for f in found:
        if _executable(Path(f)):
            return Path(f)
    return None


def report_key(path: Path) -> str:
    """Cache key of a report: first 16 hex digits of its sha256, and its size in bytes."""
    h = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return f"{h.hexdigest()[:16]}-{size}"


def cached_export_path(path: Path) -> Path:
    """Where the SQLite export of report `path` is (or will be) cached."""
    return cache_dir() / "nsys" / f"{path.stem}-{report_key(path)}.sqlite"


def _complete_sqlite(path: Path) -> bool:
    """Whether `path` is as long as its SQLite header says (page size x page count): catches truncation
    without reading the whole file."""
    with path.open("rb") as fh:
        head = fh.read(100)
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        return False
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    header_count_valid = head[24:28] == head[92:96] and pages > 0
    return not header_count_valid or path.stat().st_size == page_size * pages


def _is_nsys_sqlite(path: Path) -> bool:
    """Whether `path` is a complete SQLite file with Nsight Systems' StringIds table."""
    if not path.is_file() or not _complete_sqlite(path):
        return False
    try:
        con = connect(path)
        try:
            return con.execute("SELECT 1 FROM sqlite_master WHERE name = 'StringIds'").fetchone() is not None
        finally:
            con.close()
    except (FormatError, sqlite3.Error):
        return False


def _last_line(text: bytes | str | None) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


class _Interrupted(BaseException):
    """A termination signal arrived during an export (a BaseException, so that no `except Exception` eats it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise _Interrupted(signum)


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """While inside, INTERRUPT_SIGNALS raise _Interrupted (main thread only: signal handlers live there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in INTERRUPT_SIGNALS:
        with contextlib.suppress(OSError, ValueError):
            previous[sig] = signal.signal(sig, _raise_interrupted)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(folder: Path, max_age_s: float = 2 * EXPORT_TIMEOUT_S) -> int:
    """Remove our temporary export files in `folder` left by a process that is gone (or older than `max_age_s`);
    return how many were removed. Files not named as ours are never touched."""
    removed = 0
    try:
        entries = list(folder.iterdir())
    except OSError:
        return 0
    now = time.time()
    for f in entries:
        m = _TMP_NAME.match(f.name)
        if not m or int(m[1]) == os.getpid():
            continue
        try:
            old = now - f.lstat().st_mtime > max_age_s
            if old or not _pid_alive(int(m[1])):
                f.unlink()
                removed += 1
        except OSError:
            continue
    return removed


def _pdeathsig() -> Callable[[], None] | None:
    """Linux: a function for the child to run between fork and exec that has the kernel SIGKILL it when the
    process that started it dies, SIGKILL included. nsys runs in its own session (a terminal's Ctrl-C reaches
    traceinsight alone, which then stops nsys), so nothing else stops it when traceinsight is killed outright: on
    the H200 machine the real nsys 2025.3.1 then went on writing its temporary export until its next progress line
    hit the closed pipe (tests/data/nsys_real/README.md), and a quiet nsys would run to the end of its export.
    libc's prctl is found here, in the parent: the child only calls it (no import, no dlopen after fork)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def in_child() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return in_child


def _run_nsys(cmd: list[str], path: Path, timeout_s: float) -> subprocess.CompletedProcess[bytes]:
    """Run nsys in its own process group; on timeout, interruption or any error kill the whole group (and on
    Linux the kernel kills nsys if traceinsight is killed outright)."""
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_pdeathsig(),
        )
    except OSError as exc:
        raise ToolMissingError(f"{path}: cannot run {cmd[0]} ({exc.strerror or exc})") from None
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise FormatError(f"{path}: `nsys export` did not finish within {timeout_s:g} s") from None
    except BaseException:
        _kill(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(Exception):
        proc.communicate(timeout=10)


def export(path: Path, timeout_s: float = EXPORT_TIMEOUT_S) -> Path:
    """Return a SQLite export of the .nsys-rep `path`: the cached one when valid, else a fresh
    `nsys export --type sqlite`. Raises ToolMissingError without nsys, FormatError when nsys fails."""
    target = cached_export_path(path)
    if _is_nsys_sqlite(target):
        return target
    try:
        nsys = find_nsys()
    except ToolMissingError as exc:
        raise ToolMissingError(f"{path}: {exc}") from None
    if nsys is None:
        raise ToolMissingError(
            f"{path}: reading an .nsys-rep needs Nsight Systems' `nsys` (not found on PATH, $NSYS or /opt/nvidia); "
            f"install it or export on a machine that has it: nsys export --type sqlite -o {path.stem}.sqlite {path}, "
            "then pass the .sqlite"
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"{path}: cannot create the export cache {target.parent} ({exc.strerror or exc}); "
            "set $TRACEINSIGHT_CACHE_DIR to a writable folder"
        ) from None
    remove_stale_temporaries(target.parent)
    # Our own unique temporary name: nsys never overwrites a file we did not create, and only a complete
    # export is renamed onto the cache entry.
    tmp = target.with_name(f".{target.stem}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp.sqlite")
    cmd = [str(nsys), "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(tmp), str(path)]
    try:
        with _signals_raise():
            try:
                proc = _run_nsys(cmd, path, timeout_s)
                if proc.returncode != 0:
                    why = _last_line(proc.stderr) or _last_line(proc.stdout) or _status(proc.returncode)
                    raise FormatError(f"{path}: `nsys export` failed: {why}")
                if not _is_nsys_sqlite(tmp):
                    why = _last_line(proc.stderr) or _last_line(proc.stdout) or "no SQLite file written"
                    raise FormatError(f"{path}: `nsys export` produced no usable SQLite export ({why})")
                os.replace(tmp, target)
                return target
            finally:
                for suffix in ("", "-journal", "-wal", "-shm"):
                    tmp.with_name(tmp.name + suffix).unlink(missing_ok=True)
    except _Interrupted as stop:
        # Cleaned up above; now end as the signal would have (the handler in force before the export runs).
        os.kill(os.getpid(), stop.signum)
        raise SystemExit(128 + stop.signum) from None


def _status(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"
