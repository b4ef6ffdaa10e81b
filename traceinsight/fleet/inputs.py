"""What a fleet run analyzes: trace files named by paths, folders, globs, a list file, or object-store URLs
(`s3://...`, `gs://...`, any fsspec protocol, when fsspec is installed), each with the sidecar and the Nsight
Compute CSV beside it (`<stem>.meta.json[.gz]` / `.sidecar.json[.gz]` / `.nsys.meta.json`; `<stem>.ncu.csv`), and a
digest of each input's content that decides whether it was analyzed before.

Local inputs are named by their absolute path, so that a worker with another working directory (a Ray task)
finds them. Their digest is a BLAKE2b of the bytes of the trace and of its companions; a file whose size and
modification time match the manifest's entry keeps the digest recorded there instead of being read again.
Remote inputs are identified by their store's own key (fsspec's `ukey`: an ETag or checksum), never downloaded
just to be hashed.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from traceinsight.errors import InputError
from traceinsight.ingest.paths import (
    NCU_ENDINGS,
    SIDECAR_ENDINGS,
    expand_paths,
    is_trace_name,
    ncu_for,
    sidecar_for,
    trace_stem,
)

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_GLOB_CHARS = frozenset("*?[")
HASH_CHUNK = 1 << 20
HASH_THREADS = 4


@dataclass(frozen=True)
class Input:
    """One trace to analyze. `fingerprint` is what changes when the files change (sizes and modification times,
    or the store's keys); `digest` identifies the content (None until `with_digests`)."""

    source: str
    sidecar: str | None
    fingerprint: str
    size_bytes: int | None
    digest: str | None = None
    ncu: str | None = None

    @property
    def companions(self) -> list[str]:
        """The sidecar and the ncu CSV, those there are."""
        return [c for c in (self.sidecar, self.ncu) if c]

    @property
    def remote(self) -> bool:
        return is_url(self.source)


def is_url(text: str) -> bool:
    """Whether `text` names an object-store location (`scheme://...`) rather than a local path."""
    return bool(_URL.match(text)) and not text.startswith("file://")


def read_list(path: Path) -> list[str]:
    """The inputs named in a list file: one path, glob or URL per line; blank lines and `#` comments skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the list of traces ({exc.__class__.__name__})") from None
    return [s for line in text.splitlines() if (s := line.split("#", 1)[0].strip())]


def discover(args: Iterable[str]) -> list[Input]:
    """The inputs that `args` name, in order, each once. A folder or glob that holds no trace, or a URL when
    fsspec is not installed, is an InputError; a missing plain file is kept (its analysis fails and is recorded,
    without stopping the others)."""
    out: list[Input] = []
    seen: set[str] = set()
    for arg in args:
        text = arg[len("file://"):] if arg.startswith("file://") else arg
        found = _remote(text) if is_url(text) else [_local(p) for p in expand_paths([text])]
        for item in found:
            if item.source not in seen:
                seen.add(item.source)
                out.append(item)
    if not out:
        raise InputError("no traces to analyze")
    return out


def _local(path: Path) -> Input:
    source = str(path.expanduser().absolute())
    sidecars = sidecar_for(Path(source))
    sidecar = str(sidecars[0]) if sidecars else None
    ncus = ncu_for(Path(source))
    ncu = str(ncus[0]) if ncus else None
    parts = []
    size = None
    for i, p in enumerate((source, sidecar, ncu)):
        if p is None:
            continue
        try:
            st = os.stat(p)
        except OSError:
            parts.append("missing")
            continue
        parts.append(f"{st.st_size}:{st.st_mtime_ns}")
        if i == 0:
            size = st.st_size
    return Input(source, sidecar, "|".join(parts), size, ncu=ncu)


def load_fsspec() -> Any:
    try:
        import fsspec
    except ImportError:
        raise InputError("reading traces from URLs needs fsspec (and the store's own package, e.g. s3fs): "
                         "pip install 'traceinsight-attention[fleet]' s3fs") from None
    return fsspec


def _remote(url: str) -> list[Input]:
    fsspec = load_fsspec()
    try:
        fs, path = fsspec.core.url_to_fs(url)
        if _GLOB_CHARS & set(path):
            paths = [p for p in sorted(fs.glob(path)) if is_trace_name(PurePosixPath(p).name)]
        elif fs.isdir(path):
            paths = [p for p in sorted(fs.find(path)) if is_trace_name(PurePosixPath(p).name)]
        else:
            paths = [path]
        if not paths:
            raise InputError(f"{url}: no trace files there")
        items = []
        for p in paths:
            stem = trace_stem(PurePosixPath(p).name)
            parent = str(PurePosixPath(p).parent)
            sidecar = next((c for e in SIDECAR_ENDINGS if fs.isfile(c := f"{parent}/{stem}{e}")), None)
            ncu = next((c for e in NCU_ENDINGS if fs.isfile(c := f"{parent}/{stem}{e}")), None)
            keys = [str(fs.ukey(x)) for x in (p, sidecar, ncu) if x]
            size = fs.size(p)
            items.append(Input(fs.unstrip_protocol(p), fs.unstrip_protocol(sidecar) if sidecar else None,
                               "|".join(keys), int(size) if size is not None else None,
                               ncu=fs.unstrip_protocol(ncu) if ncu else None))
        return items
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a store's errors come in its own types; say which URL failed
        raise InputError(f"{url}: cannot list ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
                         ) from None


def with_digests(inputs: list[Input], known: Mapping[str, tuple[str, str]] | None = None) -> list[Input]:
    """`inputs` with their digests: reused from `known` (source -> (fingerprint, digest)) when the fingerprint
    is unchanged, else a BLAKE2b of the local files' bytes (threads read several files at once), or the store's
    keys for remote inputs. A file that cannot be read gets no digest (its analysis will say why)."""
    known = known or {}

    def one(item: Input) -> Input:
        old = known.get(item.source)
        if old and old[0] == item.fingerprint:
            return replace(item, digest=old[1])
        if item.remote:
            return replace(item, digest="key:" + hashlib.blake2b(item.fingerprint.encode(), digest_size=16).hexdigest())
        return replace(item, digest=file_digest([item.source, *item.companions]))

    with ThreadPoolExecutor(HASH_THREADS) as pool:
        return list(pool.map(one, inputs))


def file_digest(paths: list[str]) -> str | None:
    """BLAKE2b (128 bits, hex) of the files' bytes one after the other, each prefixed with its length; None when
    one cannot be read."""
    h = hashlib.blake2b(digest_size=16)
    try:
        for p in paths:
            h.update(str(os.path.getsize(p)).encode() + b"\0")
            with open(p, "rb") as fh:
                while chunk := fh.read(HASH_CHUNK):
                    h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()
