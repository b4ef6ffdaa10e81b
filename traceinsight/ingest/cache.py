"""A cache of normalized databases, one per input trace file, so that re-analyzing an unchanged trace skips
reading it.

Each entry is a DuckDB file holding the normalized tables of one trace (trace_id 0), in the cache folder
(`$TRACEINSIGHT_CACHE_DIR`, else `$XDG_CACHE_HOME/traceinsight`, else `~/.cache/traceinsight`) under `db/`,
never beside the user's files. An entry is named by a key of the input's real path, size, modification time
(ns) and inode, and of the reader code (`code_version("ingest")`: a hash of the ingest package's sources and
schema, the traceinsight and DuckDB versions): a changed file, or a changed reader, misses. The file's content is
not hashed (reading a 4 GB trace to hash it costs a good part of ingesting it); `load(..., cache=False)` or
`TRACEINSIGHT_CACHE=0` bypasses the cache.

Entries are written to a temporary file in the same folder and renamed into place (atomic); a damaged entry is
deleted and the trace read again. Files smaller than `CACHE_MIN_BYTES` are not cached (reading them is about
as fast as copying their rows), and least-recently-used entries are deleted beyond `CACHE_MAX_BYTES`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import uuid
from functools import cache
from pathlib import Path
from typing import Literal

from traceinsight import __version__

# Inputs smaller than this (bytes on disk) are read again rather than cached ($TRACEINSIGHT_CACHE_MIN_BYTES).
CACHE_MIN_BYTES = 4 << 20
# Total size of the entries kept (bytes); older entries are deleted beyond it ($TRACEINSIGHT_CACHE_MAX_BYTES).
CACHE_MAX_BYTES = 8 << 30
SUFFIX = ".duckdb"

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def cache_root() -> Path:
    """The folder holding traceinsight's caches (created on first write, not here)."""
    if os.environ.get("TRACEINSIGHT_CACHE_DIR"):
        return Path(os.environ["TRACEINSIGHT_CACHE_DIR"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "traceinsight"
    return Path.home() / ".cache" / "traceinsight"


def db_dir() -> Path:
    return cache_root() / "db"


def enabled(cache: bool | None) -> bool:
    """`cache` if given, else on unless $TRACEINSIGHT_CACHE is 0/off/no/false."""
    if cache is not None:
        return cache
    return not switched_off("TRACEINSIGHT_CACHE")


def switched_off(variable: str) -> bool:
    """Whether the environment variable `variable` says off (0/off/no/false); unset is on."""
    return os.environ.get(variable, "1").strip().lower() in ("0", "off", "no", "false")


def min_bytes() -> int:
    return int(os.environ.get("TRACEINSIGHT_CACHE_MIN_BYTES", CACHE_MIN_BYTES))


def max_bytes() -> int:
    return int(os.environ.get("TRACEINSIGHT_CACHE_MAX_BYTES", CACHE_MAX_BYTES))


# Files whose change may change what a cache holds: sources, queries and data (rules, remedies).
CODE_SUFFIXES = (".py", ".sql", ".toml")
CodeScope = Literal["ingest", "package"]


@cache
def code_version(scope: CodeScope = "ingest") -> str:
    """Hash of the code that decides a cache's content, with the traceinsight and DuckDB versions (CODE_SUFFIXES
    files only; once per process):
    - "ingest", the normalized databases of this cache: the ingest package's own files (readers, schema), by
      content (~20 files, ~1.5 ms). A change elsewhere in traceinsight leaves these entries valid, and so does a
      reinstall or checkout that rewrites unchanged files: re-reading a multi-GB trace is the dearest miss there is.
    - "package", the analysis cache (cli/analysis_cache.py; its key holds this cache's `key` of each input, so
      the ingest content too): every file of the traceinsight package, by path, size and modification time (a
      stat each, ~150 files, ~3 ms; reading them all would be the dearer part of a kept analysis's start). A
      touched but unchanged file costs one analysis."""
    import duckdb

    ingest = Path(__file__).resolve().parent
    h = hashlib.sha256(f"{__version__}|{duckdb.__version__}".encode())
    if scope == "ingest":
        for p in sorted(ingest.iterdir(), key=lambda e: e.name):
            if p.suffix in CODE_SUFFIXES:
                h.update(p.name.encode())
                h.update(p.read_bytes())
    elif scope == "package":
        root = ingest.parent
        for p in sorted(root.rglob("*")):
            if p.suffix in CODE_SUFFIXES and "__pycache__" not in p.parts:
                st = p.stat()
                h.update(f"{p.relative_to(root)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    else:
        raise ValueError(f"code scope {scope!r}: expected 'ingest' or 'package'")
    return h.hexdigest()[:16]


def key(path: Path) -> str:
    """The cache key of input `path` (see the module docstring)."""
    real = os.path.realpath(path)
    st = os.stat(real)
    text = f"{real}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}|{code_version()}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def entry_path(path: Path) -> Path:
    """Where the cached database of input `path` is (or would be)."""
    stem = _SAFE.sub("_", Path(path).name)[:60]
    return db_dir() / f"{stem}-{key(path)}{SUFFIX}"


def lookup(path: Path) -> Path | None:
    """The cached database of `path` when there is one (and mark it used)."""
    try:
        entry = entry_path(path)
        if not entry.is_file():
            return None
        os.utime(entry)  # least-recently-used order for pruning
        return entry
    except OSError:
        return None


def worth_caching(path: Path) -> bool:
    try:
        return os.stat(path).st_size >= min_bytes()
    except OSError:
        return False


def temp_path(final: Path) -> Path:
    """A temporary name beside `final` (same folder, so the rename is atomic)."""
    return final.with_name(f".{final.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def commit(tmp: Path, final: Path) -> None:
    """Move a finished temporary database into place, then prune its folder."""
    wal = tmp.with_name(tmp.name + ".wal")
    with contextlib.suppress(OSError):
        wal.unlink()
    os.replace(tmp, final)
    prune(folder=final.parent)


def discard(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".wal")):
        with contextlib.suppress(OSError):
            p.unlink()


def prune(limit: int | None = None, folder: Path | None = None) -> list[Path]:
    """Delete least-recently-used entries of `folder` (default: the databases' `db_dir()`) until their total is
    at most `limit` bytes; return those deleted. Temporary files older than a day (left by killed processes) and
    the analysis cache's markers of runs older than a day are deleted too."""
    limit = max_bytes() if limit is None else limit
    folder = db_dir() if folder is None else folder
    try:
        entries = [(p, p.stat()) for p in folder.iterdir() if p.is_file()]
    except OSError:
        return []
    import time

    now = time.time()
    removed = []
    for p, st in entries:
        stale = (p.name.startswith(".") and p.name.endswith((".tmp", ".tmp.wal"))) or p.suffix == ".seen"
        if stale and now - st.st_mtime > 86400:
            discard(p)
            removed.append(p)
    live = sorted(((p, st) for p, st in entries if p.suffix == SUFFIX), key=lambda e: e[1].st_mtime)
    total = sum(st.st_size for _, st in live)
    for p, st in live:
        if total <= limit:
            break
        discard(p)
        removed.append(p)
        total -= st.st_size
    return removed
