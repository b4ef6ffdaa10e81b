"""The decompressed bytes of a file, in chunks: plain or gzip (detected by its magic bytes, every member read, at
ISA-L's speed), the UTF-8 byte-order mark removed, sizes checked against the decompression limits; a reading
thread that runs a few chunks ahead of the consumer; and the count of what a reader repaired on the way
(`Repairs`). Shared by the JSON readers (json_stream, json_repair), the Nsight Compute CSV and the FlashInfer log.
"""

from __future__ import annotations

import threading
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from queue import Queue
from typing import Any, BinaryIO, TypeVar, cast

from isal import isal_zlib

from traceinsight.errors import FormatError, InputError

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"

# Decompressed bytes per chunk handed to the parser (and the most a batch holds beyond one element). Small
# chunks stay in the CPU caches and in malloc's heap: 2 MB read a 1 GB trace faster (4.0 s) than 16 MB (7.7 s)
# on the 2-core machine, at a third of the memory.
CHUNK_BYTES = 2 << 20
# Compressed bytes per read of a gzip file.
READ_BYTES = 1 << 20
# Chunks decompressed ahead of the parser by the reading thread.
READ_AHEAD = 2

# What the lenient parser repaired, by kind, in the order messages are listed.
REPAIR_MESSAGES = {
    "gzip_trailing": "{n} bytes after the end of the gzip stream ignored",
    "gzip_cut": "the gzip stream ends before its end-of-stream marker (file cut short?): read the data before the cut",
    "bigint": "{n} integers of more than 4300 digits read as null",
    "nonfinite": "{n} bare non-finite or N/A numbers (inf, nan, ...) read as null",
    "surrogate": "{n} escaped lone UTF-16 surrogates read as U+FFFD",
    "backslash": "{n} backslashes that start no JSON escape read literally",
    "trailing": "{n} characters after the end of the JSON document ignored",
}

class Repairs(Counter[str]):
    """Counts of repairs by kind (keys of REPAIR_MESSAGES)."""

    def messages(self) -> list[str]:
        return [REPAIR_MESSAGES[k].format(n=self[k]) for k in REPAIR_MESSAGES if self[k]]


# ================================================================== bytes of the file
def byte_chunks(path: Path, repairs: Repairs, cut_ok: bool = False) -> Iterator[bytes]:
    """The decompressed bytes of `path` (gzip detected by its magic bytes, every member read) in chunks of at
    most CHUNK_BYTES, the UTF-8 byte-order mark removed. Damaged gzip raises a one-line FormatError; a gzip
    stream cut short too, unless `cut_ok` (then the data before the cut is given and `repairs["gzip_cut"]` set)."""
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    with fh:
        first = _read(path, fh, READ_BYTES)
        gz = first.startswith(GZIP_MAGIC)
        raw = _gunzip(path, fh, first, repairs, cut_ok) if gz else _plain(path, fh, first)
        started = False
        pending = b""
        for chunk in raw:
            if not started:
                pending += chunk
                if len(pending) < len(UTF8_BOM) and UTF8_BOM.startswith(pending):
                    continue
                chunk = pending[len(UTF8_BOM) :] if pending.startswith(UTF8_BOM) else pending
                started = True
            if chunk:
                yield chunk
        if not started and pending:
            yield pending


def _read(path: Path, fh: BinaryIO, n: int) -> bytes:
    try:
        return fh.read(n)
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _plain(path: Path, fh: BinaryIO, first: bytes) -> Iterator[bytes]:
    if first:
        yield first
    while chunk := _read(path, fh, CHUNK_BYTES):
        yield chunk


def _gunzip(path: Path, fh: BinaryIO, first: bytes, repairs: Repairs, cut_ok: bool = False) -> Iterator[bytes]:
    """Decompress every gzip member under the decompression limits (`limits.DecompressionBudget`: absolute size
    and ratio, so a gzip bomb stops with a one-line LimitError); zero padding after the last member is ignored,
    other trailing bytes are ignored and counted in `repairs`. A stream cut short raises a FormatError, or with
    `cut_ok` ends after the data before the cut (noted in `repairs`)."""
    from traceinsight.ingest.limits import DecompressionBudget

    budget = DecompressionBudget(path)
    consumed = 0
    d = _inflater()
    pending = first
    while True:
        if not pending:
            pending = _read(path, fh, READ_BYTES)
            if not pending:
                if cut_ok:
                    repairs["gzip_cut"] = 1
                    return
                raise FormatError(f"{path}: damaged gzip stream (truncated: it ends before the end-of-stream marker)")
        before = len(pending)
        try:
            out = d.decompress(pending, CHUNK_BYTES)
        except INFLATE_ERRORS as exc:
            raise FormatError(f"{path}: damaged gzip stream ({exc})") from None
        # At the end of a member the bytes after it are in unused_data (unconsumed_tail may repeat them).
        pending = d.unused_data if d.eof else d.unconsumed_tail
        consumed += before - len(pending)
        if out:
            budget.add(len(out), consumed)
            yield out
        if not d.eof:
            continue
        rest = pending
        while len(rest) < len(GZIP_MAGIC) and (more := _read(path, fh, READ_BYTES)):
            rest += more
        if rest.startswith(GZIP_MAGIC):
            d = _inflater()
            pending = rest
            continue
        size, nonzero = len(rest), bool(rest.strip(b"\x00"))
        while more := _read(path, fh, READ_BYTES):
            size += len(more)
            nonzero = nonzero or bool(more.strip(b"\x00"))
        if nonzero:
            repairs["gzip_trailing"] += size
        return


# What a damaged gzip stream raises (isal's stub types its error class as an instance).
INFLATE_ERRORS: tuple[type[Exception], ...] = (cast(type[Exception], isal_zlib.error), zlib.error)


def _inflater() -> Any:  # noqa: ANN401 (isal ships no type information)
    """A decompressor of one gzip member: ISA-L's inflate (python-isal), zlib's interface at about twice zlib's
    speed (the sweep trace's 27 MB: 0.04 s against 0.09 s)."""
    return isal_zlib.decompressobj(wbits=31)


_T = TypeVar("_T")


def read_ahead(chunks: Iterator[_T], depth: int = READ_AHEAD, name: str = "traceinsight-read") -> Iterator[_T]:
    """Run `chunks` in a background thread, `depth` items ahead: zlib, file reads and numpy release the GIL, so
    decompression (and the Kineto reader's byte scans) overlap with parsing. Exceptions are re-raised in the
    consumer. Closing the consumer stops the thread (after the item it is producing) before returning."""
    q: Queue[tuple[_T | None, BaseException | None]] = Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for c in chunks:
                if stop.is_set():
                    return
                q.put((c, None))
            q.put((None, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            q.put((None, exc))

    t = threading.Thread(target=produce, name=name, daemon=True)
    t.start()
    try:
        while True:
            c, exc = q.get()
            if exc is not None:
                raise exc
            if c is None:
                return
            yield c
    finally:
        stop.set()
        while t.is_alive():  # unblock a producer waiting on a full queue
            while not q.empty():
                q.get_nowait()
            t.join(timeout=0.05)
