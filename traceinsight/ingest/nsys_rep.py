""".nsys-rep reports: converted to SQLite with the user's own `nsys export`, and the export cached.

The export lands in a cache folder (`$TRACEINSIGHT_CACHE_DIR`, else `$XDG_CACHE_HOME/traceinsight`, else
`~/.cache/traceinsight`) under `nsys/`, named by the report's content (sha256 prefix and size), so a report is
exported once and a changed report is exported again. nsys writes to a temporary name in that folder which is
renamed into place only once the export succeeded: a failed, interrupted or timed-out export leaves nothing
behind, and nothing beside the user's report is ever written.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import sqlite3
import subprocess
import uuid
from pathlib import Path

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
    # Our own unique temporary name: nsys never overwrites a file we did not create, and only a complete
    # export is renamed onto the cache entry.
    tmp = target.with_name(f".{target.stem}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp.sqlite")
    try:
        try:
            proc = subprocess.run(
                [str(nsys), "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(tmp), str(path)],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise FormatError(f"{path}: `nsys export` did not finish within {timeout_s:g} s") from None
        except OSError as exc:
            raise ToolMissingError(f"{path}: cannot run {nsys} ({exc.strerror or exc})") from None
        if proc.returncode != 0:
            why = _last_line(proc.stderr) or _last_line(proc.stdout) or f"exit status {proc.returncode}"
            raise FormatError(f"{path}: `nsys export` failed: {why}")
        if not _is_nsys_sqlite(tmp):
            why = _last_line(proc.stderr) or _last_line(proc.stdout) or "no SQLite file written"
            raise FormatError(f"{path}: `nsys export` produced no usable SQLite export ({why})")
        os.replace(tmp, target)
        return target
    finally:
        for suffix in ("", "-journal", "-wal", "-shm"):
            tmp.with_name(tmp.name + suffix).unlink(missing_ok=True)
