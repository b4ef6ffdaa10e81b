"""Where the dashboard's traces come from: the bundled examples, paths given on the command line, or uploads.
Uploads are size-checked, written to a private temporary folder (mode 0700) for the readers, and deleted as
soon as the analysis is done. Everything is keyed by a SHA-256 of the bytes, so the analysis cache holds one
entry per distinct file whatever its name."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from traceinsight.errors import InputError
from traceinsight.ingest.paths import SIDECAR_ENDINGS, expand_paths, sidecar_for

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
# Largest upload accepted (MB); `traceinsight dashboard` passes the same value to Streamlit's server.
MAX_UPLOAD_MB = int(os.environ.get("TRACEINSIGHT_MAX_UPLOAD_MB", "1024"))
# Shown first among the bundled examples: the real H200 sweep with the split-KV cliff.
DEFAULT_EXAMPLE = "h200/flashinfer_decode_sweep.pt.trace.json.gz"
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Source:
    """A trace to analyze, with its optional sidecars: a label for the UI and the files' digest (cache key). A
    trace analyzed before (`saved`: the folder of `analyze --save` or `fleet analyze`, `trace` its key there) is
    read from its saved tables instead (`traceinsight.report.saved`)."""

    label: str
    trace: Path
    meta: tuple[Path, ...] = ()
    saved: Path | None = None


def is_saved(path: Path) -> bool:
    """A folder holding saved analyses (a dataset with the `analyses` table)."""
    from traceinsight.report.saved import is_saved_folder

    return is_saved_folder(path)


def saved_sources(folder: Path) -> list[Source]:
    """One source per trace of a saved-analysis folder, by its key in the dataset."""
    from traceinsight.report.saved import dataset_keys

    return [Source(f"{folder.name}/{key} (saved)", Path(key), saved=folder) for key in dataset_keys(folder)]


def digest_saved(src: Source) -> str:
    """A key for a saved trace's cache entry: its folder, key and its tables' files (names, sizes, mtimes)."""
    assert src.saved is not None
    h = hashlib.sha256(f"{src.saved.resolve()}\0{src.trace}".encode())
    for p in sorted(src.saved.glob(f"*/trace={src.trace}/*.parquet")):
        st = p.stat()
        h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def is_sidecar(path: Path | str) -> bool:
    return str(path).lower().endswith(SIDECAR_ENDINGS)


def examples(root: Path = EXAMPLES) -> list[Source]:
    """Bundled example traces (each with the sidecar beside it): DEFAULT_EXAMPLE first, then by path. An
    `.nsys-rep` is left out when its SQLite export lies beside it (reading the export needs no nsys)."""
    if not root.is_dir():
        return []
    try:
        found = expand_paths([root])  # what `analyze FOLDER` reads: no sidecars, exports before their .nsys-rep
    except InputError:
        return []
    found.sort(key=lambda p: (p.relative_to(root).as_posix() != DEFAULT_EXAMPLE, p.relative_to(root).as_posix()))
    return [Source(p.relative_to(root).as_posix(), p, sidecar_for(p)) for p in found]


def from_args(args: list[str], meta: list[str] | None = None) -> list[Source]:
    """Sources from command-line paths: every trace its own source. The sidecars given (`meta`, the dashboard's
    --meta, and paths named like sidecars) attach to the first trace; a trace without one takes the sidecar
    beside it (`sidecar_for`), the first trace included. A saved-analysis folder gives each of its traces."""
    paths = [Path(a) for a in args]
    saved = [src for p in paths if is_saved(p) for src in saved_sources(p)]
    traces = [p for p in paths if not is_sidecar(p) and not is_saved(p)]
    metas = tuple(Path(m) for m in meta or ()) + tuple(p for p in paths if is_sidecar(p))
    return [Source(p.name, p, metas if i == 0 and metas else sidecar_for(p)) for i, p in enumerate(traces)] + saved


def digest_files(paths: list[Path]) -> str:
    """SHA-256 over the files' bytes (in order)."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()


def digest_bytes(blobs: list[bytes]) -> str:
    h = hashlib.sha256()
    for b in blobs:
        h.update(b)
        h.update(b"\0")
    return h.hexdigest()


def safe_name(name: str) -> str:
    """A file name without folders or odd characters (the suffixes, which tell the format apart, are kept)."""
    base = _SAFE.sub("_", Path(name).name).lstrip(".")
    return base or "upload"


class UploadTooLarge(ValueError):
    pass


def check_size(name: str, size: int, limit_mb: int = MAX_UPLOAD_MB) -> None:
    if size > limit_mb * 1024 * 1024:
        raise UploadTooLarge(f"{name}: {size / 1e6:.0f} MB is over the upload limit of {limit_mb} MB; analyze it "
                             "with `traceinsight analyze --format html` or start `traceinsight dashboard PATH`")


@contextmanager
def private_copies(files: list[tuple[str, bytes]]) -> Iterator[list[Path]]:
    """Write uploaded (name, bytes) pairs into a fresh private temporary folder; delete it afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="traceinsight-upload-"))  # mode 0700
    try:
        paths = []
        for i, (name, data) in enumerate(files):
            p = folder / f"{i}-{safe_name(name)}"
            p.write_bytes(data)
            paths.append(p)
        yield paths
    finally:
        shutil.rmtree(folder, ignore_errors=True)
