"""Expand what a user names on the command line (files, folders, globs) into the trace files to read."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from pathlib import Path

from traceinsight.errors import InputError

# Files taken from a folder or a glob, by name ending (case-insensitive). A file named explicitly is always
# taken, whatever its name: the format is detected from the content.
TRACE_ENDINGS = (".json", ".json.gz", ".sqlite", ".nsys-rep")
# Files that accompany traces rather than being traces: skipped in folders and globs (pass them with
# --meta / --ncu instead).
COMPANION_ENDINGS = (".meta.json", ".meta.json.gz", ".sidecar.json", ".sidecar.json.gz", ".timing.json",
                     ".timing.json.gz", ".ncu.csv", "manifest.json")
# Sidecars looked for beside a trace (`sidecar_for`), in order: `<stem><ending>`.
SIDECAR_ENDINGS = (".meta.json.gz", ".meta.json", ".sidecar.json.gz", ".sidecar.json", ".nsys.meta.json")
NCU_ENDINGS = (".ncu.csv", ".ncu.csv.gz")
# Endings dropped from a trace's file name to form its stem (longest first).
TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".trace.json.gz", ".trace.json", ".json.gz", ".json",
                  ".nsys-rep", ".sqlite", ".csv")
_GLOB_CHARS = frozenset("*?[")


def is_trace_name(name: str) -> bool:
    low = name.lower()
    return low.endswith(TRACE_ENDINGS) and not low.endswith(COMPANION_ENDINGS) and not low.startswith(".")


def trace_stem(name: str) -> str:
    """A trace's file name without its trace suffix (`rank0.pt.trace.json.gz` -> `rank0`)."""
    low = name.lower()
    for suffix in TRACE_SUFFIXES:
        if low.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def sidecar_for(trace: Path) -> tuple[Path, ...]:
    """The sidecar beside a trace, if there is one: `<stem>.meta.json[.gz]`, `<stem>.sidecar.json[.gz]` or
    `<stem>.nsys.meta.json` (the collectors' names)."""
    return _beside(trace, SIDECAR_ENDINGS)


def ncu_for(trace: Path) -> tuple[Path, ...]:
    """The Nsight Compute CSV beside a trace, if there is one: `<stem>.ncu.csv` (or `.ncu.csv.gz`)."""
    return _beside(trace, NCU_ENDINGS)


def _beside(trace: Path, endings: tuple[str, ...]) -> tuple[Path, ...]:
    """The first existing `<stem><ending>` beside `trace`, as a 1-tuple, else ()."""
    stem = trace_stem(trace.name)
    for ending in endings:
        p = trace.with_name(stem + ending)
        if p.is_file():
            return (p,)
    return ()


def expand_paths(args: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Files, folders (searched recursively) and glob patterns (`**` allowed) -> trace files, in the order
    given (sorted within a folder or glob), each once (by real path). In a folder or glob match, an `.nsys-rep`
    whose SQLite export (same stem, `.sqlite`) is beside it is left out: the export is read instead of running
    nsys. A folder or glob without any trace file is an InputError; a missing plain path is returned as is (the
    reader reports it)."""
    out: list[Path] = []
    seen: set[str] = set()
    for arg in args:
        text = os.fspath(arg)
        p = Path(text).expanduser()
        if p.is_dir():
            found = _folder(p)
            if not found:
                raise InputError(f"{p}: no trace files in this folder ({', '.join(TRACE_ENDINGS)})")
        elif not p.exists() and _GLOB_CHARS & set(text):
            matches = sorted(Path(m) for m in glob.glob(os.path.expanduser(text), recursive=True))
            found = _prefer_exports([m for m in matches if m.is_file() and is_trace_name(m.name)])
            found += [f for m in matches if m.is_dir() for f in _folder(m)]
            if not found:
                raise InputError(f"{text}: no trace files match this pattern")
        else:
            found = [p]
        for f in found:
            real = os.path.realpath(f)
            if real not in seen:
                seen.add(real)
                out.append(f)
    return out


def _folder(p: Path) -> list[Path]:
    return _prefer_exports(sorted(f for f in p.rglob("*") if f.is_file() and is_trace_name(f.name)))


def _prefer_exports(files: list[Path]) -> list[Path]:
    names = {f.with_suffix("") for f in files if f.suffix.lower() == ".sqlite"}
    return [f for f in files if not (f.suffix.lower() == ".nsys-rep" and f.with_suffix("") in names)]
