"""Tell a trace's format from its content (magic bytes, JSON keys, SQLite tables), not its extension."""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path
from urllib.parse import quote

from traceinsight.errors import FormatError, InputError

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_REP_MAGIC = b"NVIDIA Tegra Profiler Report"
NCU_CSV_HEADER = b'"ID","Process ID","Process Name"'

_PEEK_BYTES = 1 << 20


def check_readable(path: Path) -> None:
    """One-line errors for paths that are not readable files."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a trace file")
    if not path.is_file():
        raise InputError(f"{path}: not a regular file")
    try:
        size = path.stat().st_size
        with path.open("rb"):
            pass
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if size == 0:
        raise InputError(f"{path}: the file is empty")


def _peek_gzip(path: Path) -> bytes:
    """The first decompressed bytes (up to _PEEK_BYTES); a stream cut short still gives what it holds."""
    with path.open("rb") as fh:
        raw = fh.read(_PEEK_BYTES)
    try:
        return zlib.decompressobj(wbits=31).decompress(raw, _PEEK_BYTES)
    except zlib.error as exc:
        raise FormatError(f"{path}: damaged gzip stream ({exc})") from None


def sqlite_tables(path: Path) -> set[str]:
    """Names of the tables of a SQLite file, opened read-only and immutable (never modified)."""
    try:
        con = sqlite3.connect(f"file:{quote(str(path.absolute()))}?mode=ro&immutable=1", uri=True)
        try:
            return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        finally:
            con.close()
    except sqlite3.Error as exc:
        from traceinsight.ingest import sqlite_salvage

        try:
            names = sqlite_salvage.table_names(path)
        except (sqlite_salvage.NotSQLite, OSError):
            names = set()
        if names:  # truncated or damaged, yet its schema is readable: the reader salvages what precedes the cut
            return names
        raise FormatError(f"{path}: damaged SQLite database ({exc})") from None


def detect(path: Path) -> str:
    """Return 'json' (Kineto trace or sidecar, decided after parsing), 'nsys-sqlite', 'nsys-rep', 'ncu-csv' or
    'flashinfer-log' (FlashInfer's API log, a sidecar source)."""
    check_readable(path)
    with path.open("rb") as fh:
        head = fh.read(_PEEK_BYTES)
    if head.startswith(GZIP_MAGIC):
        head = _peek_gzip(path)
        if not head.strip():
            raise FormatError(f"{path}: the gzip stream holds no data")
    if head.startswith(SQLITE_MAGIC):
        tables = sqlite_tables(path)
        if "StringIds" in tables or any(t.startswith(("CUPTI_ACTIVITY_KIND_", "TARGET_INFO_")) for t in tables):
            return "nsys-sqlite"
        raise FormatError(
            f"{path}: a SQLite database but not an Nsight Systems export (no StringIds or CUPTI_ACTIVITY_KIND_* tables)"
        )
    if head.startswith(NSYS_REP_MAGIC):
        return "nsys-rep"
    from traceinsight.ingest.flashinfer_log_text import looks_like_log

    if looks_like_log(head):  # before JSON: a level-1 log's lines start with '['
        return "flashinfer-log"
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if stripped[:1] in (b"{", b"["):
        return "json"
    if NCU_CSV_HEADER in head:
        return "ncu-csv"
    raise FormatError(
        f"{path}: unknown format (expected a Kineto JSON trace, an Nsight Systems .nsys-rep or SQLite export, "
        "or an Nsight Compute --csv export, details or raw page)"
    )
