"""Kineto / torch.profiler JSON traces (`.json`, `.json.gz`, `.pt.trace.json.gz`) -> normalized tables.

Both the current format (categories `kernel`, `gpu_memcpy`, `cuda_runtime`, `user_annotation`, ...) and the
2021 one (`Kernel`, `Memcpy`, `Runtime`, `Operator`, GPU `tid` as the string "stream 7") are read.

Units: Kineto writes `ts` and `dur` in microseconds (floats with three decimals, or integers in older files)
on its own clock (relative to `baseTimeNanoseconds` when the file has that key). Rows keep that clock, in
int64 nanoseconds: `start_ns = round(ts * 1000)` and `end_ns = start_ns + round(dur * 1000)`, so that
`dur_ns` is exactly the duration the file states (rounding `ts + dur` in floating point can be 1 ns off).

`read(path)` streams the file (`json_stream`): memory holds a few 2 MB chunks plus the rows kept, never the
document; events of categories the tables do not use are dropped by their first bytes without being parsed, and
flow events (ph s/t/f: arrows, no duration) are never read. Three threads: one reads (and gunzips) the file, one
cuts it into batches and finds the kept events with numpy (`_kept_spans`), the caller parses them; about 4-5 CPU-s
per GB of uncompressed JSON on the 2-core development machine (docs/SCALE.md). `load_json` + `from_document`
parse a document whole (sidecars, odd layouts) and give the same rows.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from traceinsight.errors import FormatError
from traceinsight.ingest import collective_args
from traceinsight.ingest.base import Columns, Ingest
from traceinsight.ingest.graphs import HostCall, Work, graph_launch_names, replay_columns
from traceinsight.ingest.host_ops import HostOps
from traceinsight.ingest.json_stream import (
    GZIP_MAGIC,
    UTF8_BOM,
    ArrayStream,
    Batch,
    NotAnArray,
    Repairs,
    byte_chunks,
    read_ahead,
)
from traceinsight.tuning import gc_paused, stream_heap

__all__ = ["GZIP_MAGIC", "UTF8_BOM", "REPAIRS_KEY", "from_document", "load_json", "read"]

# Key under which `load_json` leaves, in the parsed document, what it had to repair (read by `from_document`).
REPAIRS_KEY = "__traceinsight_repairs__"

# ---------------------------------------------------------------- what each event category becomes (data)
KERNEL_CATS = frozenset({"kernel", "Kernel"})  # current, 2021
MEMOP_CATS = {"gpu_memcpy": "memcpy", "Memcpy": "memcpy", "gpu_memset": "memset", "Memset": "memset"}
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime"})  # host API calls; kept when they launched GPU work
# category -> (ranges.kind, ranges.side)
RANGE_CATS = {"user_annotation": ("annotation", "cpu"), "gpu_user_annotation": ("gpu_annotation", "gpu")}
# Operator categories that carry the profiler's step ranges in traces without `user_annotation` (2021 format).
STEP_OP_CATS = frozenset({"Operator", "cpu_op"})
PROFILER_STEP_PREFIX = "ProfilerStep#"
# Trace Event phases of flow events (arrows between events: no duration, never a kernel or range): skipped.
FLOW_PHASES = frozenset({"s", "t", "f"})
FLOW_PHASES_BYTES = tuple(sorted(p.encode() for p in FLOW_PHASES))

_KERNEL, _MEMOP, _LAUNCH, _RANGE, _STEP_OP = range(5)
_DISPATCH: dict[str, int] = {
    **dict.fromkeys(KERNEL_CATS, _KERNEL),
    **dict.fromkeys(MEMOP_CATS, _MEMOP),
    **dict.fromkeys(LAUNCH_CATS, _LAUNCH),
    **dict.fromkeys(RANGE_CATS, _RANGE),
    **dict.fromkeys(STEP_OP_CATS, _STEP_OP),
}

# devices column -> deviceProperties key (Kineto writes the names of cudaDeviceProp's fields).
DEVICE_PROPERTIES: dict[str, str] = {
    "name": "name",
    "num_sms": "numSms",
    "compute_major": "computeMajor",
    "compute_minor": "computeMinor",
    "regs_per_sm": "regsPerMultiprocessor",
    "regs_per_block": "regsPerBlock",
    "smem_per_sm_bytes": "sharedMemPerMultiprocessor",
    "smem_per_block_optin_bytes": "sharedMemPerBlockOptin",
    "max_threads_per_sm": "maxThreadsPerMultiprocessor",
    "max_threads_per_block": "maxThreadsPerBlock",
    "warp_size": "warpSize",
    "total_mem_bytes": "totalGlobalMem",
}
# devices columns that may be 0 (every other property is a count or size: 0 or less is read as unknown; a
# negative value of these too).
NON_POSITIVE_OK = frozenset({"compute_minor"})
# Header keys that name the profiler's version, most specific first: (key, label in traces.tool_version).
TOOL_VERSION_KEYS = (("cupti_version", "cupti"), ("cuda_runtime_version", "cuda runtime"))

_INT32 = 2**31
_INT64 = 2**63

# Bare non-finite numbers as real Kineto versions wrote them (`"memory bandwidth (GB/s)": inf` when a copy took
# 0 us, pytorch/kineto#105), Python's json.dump spellings, and an unquoted N/A, in value position only.
_NONFINITE = re.compile(r"([:\[,]\s*)(?:-?(?:inf|nan|Infinity|NaN)|N/A)(?=\s*[,\]}])")
# A backslash that does not start a JSON escape (Windows paths in call stacks, pytorch/kineto#336).
_STRAY_BACKSLASH = re.compile(r'\\(?!["\\/bfnrtu])')
# A \uXXXX escape of a lone UTF-16 surrogate (Python's json.dump writes them): valid JSON, but no text.
_LONE_SURROGATE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


# ================================================================== reading the file
def load_json(path: Path) -> Any:
    """Read a plain or gzipped (detected by magic bytes) JSON file and parse it whole (sidecars, and traces the
    streaming reader `read` does not take).

    Damaged input raises a one-line FormatError starting with the path. Known defects of real Kineto output
    (bare `inf`/`nan`, stray backslashes, control characters in strings, trailing data) are repaired; what was
    repaired is listed under `REPAIRS_KEY` of the returned document when it is a JSON object.
    """
    repairs = Repairs()
    data = b"".join(byte_chunks(path, repairs))
    if not data.strip():
        raise FormatError(f"{path}: no JSON data in the file")
    with gc_paused():
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            try:
                doc, trailing = _parse_leniently(data, repairs)
            except _BadJSON as bad:
                raise FormatError(bad.message(path, 0)) from None
            if trailing:
                repairs["trailing"] += trailing
    if repairs and isinstance(doc, dict):
        doc[REPAIRS_KEY] = repairs.messages()
    return doc


class _BadJSON(Exception):
    """Text the lenient parser could not read: where (byte offset in the text given) and why."""

    def __init__(self, at: int | None, what: str, hint: str = "") -> None:
        super().__init__(what)
        self.at, self.what, self.hint = at, what, hint

    def message(self, path: Path, base: int) -> str:
        """The one-line FormatError message, with the byte offset shifted by `base`."""
        if self.what == "utf8":
            return f"{path}: not valid UTF-8 at byte {base + (self.at or 0)} (JSON traces are UTF-8 text)"
        if self.at is None:
            return f"{path}: not valid JSON: {self.what}"
        return f"{path}: not valid JSON at byte {base + self.at}: {self.what}{self.hint}"


def _parse_leniently(data: bytes, repairs: Repairs) -> tuple[Any, int]:
    """Slow path for text orjson rejects: repair the defects real Kineto files have (counted in `repairs`), else
    raise _BadJSON. Returns the value and the number of non-blank characters after it."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _BadJSON(exc.start, "utf8") from None
    text, n_nonfinite = _NONFINITE.subn(r"\1null", text)
    repairs["nonfinite"] += n_nonfinite
    text, n_surrogate = _LONE_SURROGATE.subn(r"\\ufffd", text)
    repairs["surrogate"] += n_surrogate
    if n_nonfinite or n_surrogate:
        try:
            return orjson.loads(text), 0  # the common case: only bare inf/nan were wrong
        except orjson.JSONDecodeError:
            pass
    # strict=False: raw control characters inside strings; parse_int: integers too long for int() become null
    decoder = json.JSONDecoder(strict=False, parse_int=functools.partial(_lenient_int, repairs))
    start = len(text) - len(text.lstrip())
    try:
        try:
            doc, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            if not exc.msg.startswith("Invalid \\escape"):
                raise
            text, n = _STRAY_BACKSLASH.subn(r"\\\\", text)
            repairs["backslash"] += n
            doc, end = decoder.raw_decode(text, start)
    except json.JSONDecodeError as exc:
        at = len(text[: exc.pos].encode("utf-8"))
        hint = " (the data ends early: truncated file?)" if not text[exc.pos :].strip() else ""
        raise _BadJSON(at, exc.msg, hint) from None
    except RecursionError:
        raise _BadJSON(None, "nested too deeply") from None
    trailing = text[end:].strip()
    return doc, len(trailing) if trailing.strip("\x00") else 0


def _lenient_int(repairs: Repairs, digits: str) -> int | None:
    """An integer of the JSON text; None (counted in `repairs`) past Python's limit on digits converted."""
    try:
        return int(digits)
    except ValueError:
        repairs["bigint"] += 1
        return None


# ================================================================== streaming
def read(path: Path, workers: int | None = None) -> Ingest | None:
    """Stream a Kineto trace (plain or gzipped JSON object with a `traceEvents` array) into the normalized
    tables, holding in memory a few chunks of the file plus the rows kept; return None when the file is JSON
    but not laid out as such an object (the caller then parses it whole with `load_json`).

    Events of categories the tables do not use (cpu_op, python_function, flows, ...) are recognised from their
    first bytes and never parsed; the others are parsed in batches with orjson, and batches orjson rejects go
    through the same repairs as `load_json`. The rows are the same as `from_document(load_json(path))`.

    `workers`: processes parsing batches (0 or 1: none, in this process); None: $TRACEINSIGHT_WORKERS, default
    0. "auto" there: one per CPU for inputs of PARALLEL_MIN_BYTES or more (gzip counted at GZIP_RATIO times its
    size). Reading and gunzip stay in this process (a thread); batches are parsed by the workers and their rows
    appended in order, so the result does not depend on the number of workers. Workers are spawned processes:
    a script calling this with workers needs the `if __name__ == "__main__":` guard. On the 2-core machines
    measured (benchmarks/ingest_scale.py) they did not pay: off by default."""
    repairs = Repairs()
    chunks = read_ahead(byte_chunks(path, repairs, cut_ok=True))
    stream = ArrayStream(path, chunks, b"traceEvents")
    t = _Tables()
    n = _worker_count(path, workers)
    prepared = None
    try:
        with gc_paused(), stream_heap():
            if n > 1:
                n_events = _read_parallel(stream.batches(), path, n, t, repairs)
            else:
                n_events = 0
                # Cutting batches and finding the kept elements run a batch ahead in a thread: their scans are
                # numpy's, which releases the GIL, so they overlap with parsing on the other core.
                prepared = read_ahead(_prepare(stream.batches(), t.host_ops), name="traceinsight-scan")
                for batch, kept in prepared:
                    events, count = _batch_events(batch, path, repairs, kept)
                    n_events += count
                    _read_events(events, t)
    except NotAnArray:
        return None
    finally:
        if prepared is not None:
            prepared.close()  # type: ignore[attr-defined]
        chunks.close()  # type: ignore[attr-defined]
    rest = stream.rest
    try:
        doc = orjson.loads(rest)
    except orjson.JSONDecodeError:
        try:
            doc, trailing = _parse_leniently(rest, repairs)
        except _BadJSON as bad:
            at = None if bad.at is None else stream.rest_offset(bad.at)
            raise FormatError(_BadJSON(at, bad.what, bad.hint).message(path, 0)) from None
        repairs["trailing"] += trailing
    ingest = _to_ingest(doc, t, path, repairs.messages())
    if stream.cut_at is not None:
        ingest.warnings.insert(
            0,
            f"{path}: the data ends at byte {stream.cut_at} inside traceEvents (file cut short?): kept the "
            f"{n_events} events before the cut",
        )
    return ingest


def _element_count(batch: Batch, events: list[Any]) -> int:
    """Elements of the array in `batch` (`events` holds only those parsed when the batch has a separator)."""
    return batch.data.count(batch.sep) + 1 if batch.sep is not None else len(events)


# A batch's kept elements, found ahead of parsing: (their insides, the number of elements in the batch), or None
# where `_kept_spans` leaves the batch to `_kept_pieces`.
_Kept = tuple[list[bytes], int] | None


def _prepare(batches: Iterator[Batch], host_ops: HostOps) -> Iterator[tuple[Batch, _Kept]]:
    """Each batch with its kept elements (`_kept_spans`), for `read`'s scanning thread, its host operations
    added to `host_ops` (found by their bytes, never parsed: `HostOps.scan`). The prefixes of skipped
    elements learned from each batch's start are kept for the batches after it (per separator): a trace's
    sections (operators, then runtime calls and kernels, then flows) are longer than a batch, and a batch whose
    first 64 KB show no operator would otherwise parse every operator and flow it holds (on the replicas of the
    sweep trace, 42 % of the elements parsed)."""
    known: dict[bytes, dict[bytes, bool]] = {}
    for batch in batches:
        kept = None
        sep, learned = batch.sep, _learn(known, batch)
        if sep is not None and learned is not None:
            if batch.braces is not None:
                kept = _kept_spans(batch.data, sep, batch.braces, learned)
            if kept is None:
                kept = _kept_pieces(batch.data, sep, learned), batch.data.count(sep) + 1
        host_ops.scan(batch.data)
        yield batch, kept


def _learn(known: dict[bytes, dict[bytes, bool]], batch: Batch) -> dict[bytes, bool] | None:
    """The prefixes of skipped elements learned up to `batch` (its first SAMPLE_BYTES included), for a batch with
    a separator (None for the others): the serial and the parallel reader learn alike, so that which elements are
    parsed does not depend on the number of workers."""
    if batch.sep is None:
        return None
    learned = known.setdefault(batch.sep, {})
    _skip_prefixes(batch.data[:SAMPLE_BYTES], batch.sep, learned)
    return learned


# Inputs at least this large (uncompressed bytes, estimated) are parsed by worker processes when read() is not
# told how many to use; gzip files are counted at GZIP_RATIO times their size.
PARALLEL_MIN_BYTES = 96 << 20
GZIP_RATIO = 12
# Batches handed to the workers ahead of the one being merged, per worker (bounds memory).
AHEAD_PER_WORKER = 2


def _worker_count(path: Path, workers: int | None) -> int:
    if workers is None:
        setting = os.environ.get("TRACEINSIGHT_WORKERS", "0").strip().lower()
        if setting != "auto":
            return max(0, int(setting)) if setting.isdigit() else 0
    else:
        return max(0, workers)
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            if fh.read(2) == GZIP_MAGIC:
                size *= GZIP_RATIO
    except OSError:
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cpus if size >= PARALLEL_MIN_BYTES and cpus > 1 else 0


def _read_parallel(batches: Iterator[Batch], path: Path, n: int, t: _Tables, repairs: Repairs) -> int:
    """Parse `batches` in `n` worker processes (spawned: this process may hold DuckDB's threads), merging
    their rows into `t` in batch order; return the number of array elements read."""
    import multiprocessing
    from collections import deque
    from concurrent.futures import Future, ProcessPoolExecutor

    pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"))
    pending: deque[Future[_Part]] = deque()
    count = 0
    known: dict[bytes, dict[bytes, bool]] = {}
    try:
        for batch in batches:
            learned = _learn(known, batch)
            pending.append(pool.submit(_parse_batch, str(path), batch, None if learned is None else dict(learned)))
            while len(pending) >= AHEAD_PER_WORKER * n:
                count += _merge(t, repairs, pending.popleft().result())
        while pending:
            count += _merge(t, repairs, pending.popleft().result())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return count


# What a worker returns for one batch: its tables' columns, host operations, skip counts, repairs and number of
# elements.
_Part = tuple[dict[str, Columns], HostOps, Counter[tuple[str, str]], Repairs, int]
_TABLES = ("kernels", "memops", "launches", "ranges", "collectives")


def _parse_batch(path: str, batch: Batch, learned: dict[bytes, bool] | None) -> _Part:
    """Worker: the rows of one batch; `learned`: the prefixes of skipped elements learned up to it (`_learn`)."""
    repairs = Repairs()
    t = _Tables()
    with gc_paused():
        kept = None
        if batch.sep is not None and learned is not None:
            kept = _kept_pieces(batch.data, batch.sep, learned), batch.data.count(batch.sep) + 1
        events, count = _batch_events(batch, Path(path), repairs, kept)
        _read_events(events, t)
        t.host_ops.scan(batch.data)
    return {name: getattr(t, name) for name in _TABLES}, t.host_ops, t.skipped, repairs, count


def _merge(t: _Tables, repairs: Repairs, part: _Part) -> int:
    """Append a worker's rows to `t`; return its number of elements."""
    cols, host_ops, skipped, fixed, count = part
    t.host_ops.extend(host_ops)
    intern = t.names.setdefault
    for name in _TABLES:
        into = getattr(t, name)
        for col, values in cols[name].items():
            if col == "name":
                values = [intern(v, v) for v in values]
            into[col].extend(values)
    t.skipped.update(skipped)
    repairs.update(fixed)
    return count


def _batch_events(batch: Batch, path: Path, repairs: Repairs, kept: _Kept = None) -> tuple[list[Any], int]:
    """The events of one batch that may be kept, parsed (see `read`), and the number of elements in the batch.
    `kept`: the batch's kept elements when they were found already (`_prepare`), else found from the batch alone."""
    data = batch.data
    if batch.sep is not None:
        pieces, count = kept_elements(batch, kept)
        try:
            events = orjson.loads(joined(pieces))
        except orjson.JSONDecodeError:
            events = None
        if events is not None and len(events) == len(pieces):
            return events, count if count is not None else data.count(batch.sep) + 1
    text = b"[" + data + b"]"
    try:
        events = orjson.loads(text)
        return events, _element_count(batch, events)
    except orjson.JSONDecodeError:
        pass
    try:
        events, trailing = _parse_leniently(text, repairs)
    except _BadJSON as bad:
        raise FormatError(bad.message(path, batch.offset - 1)) from None
    if trailing or type(events) is not list:
        raise FormatError(f"{path}: not valid JSON near byte {batch.offset}: traceEvents is not a list of values")
    return events, _element_count(batch, events)


def kept_elements(batch: Batch, kept: _Kept = None) -> tuple[list[bytes], int | None]:
    """The kept elements of a batch whose separator is known (`kept` when `_prepare` found them, else found from the
    batch alone), and the batch's element count when `_prepare` counted it."""
    assert batch.sep is not None
    return (_kept_pieces(batch.data, batch.sep), None) if kept is None else kept


def joined(pieces: list[bytes]) -> bytes:
    """Kept elements (each an object's text without its braces) as the text of a JSON array of them."""
    return b"[{" + b"},{".join(pieces) + b"}]"


def _kept_pieces(data: bytes, sep: bytes, known: dict[bytes, bool] | None = None) -> list[bytes]:
    """The insides (without their braces) of the elements of `data` that `_skip_pattern` does not rule out
    (the first element is always kept).

    Fast path, in C: the exact prefixes (separator + first keys) of skipped elements are learned from the start
    of the batch with the regular expression, each is replaced by a marker (a NUL byte, which valid JSON text
    never holds, and the prefix's number), operators named ProfilerStep#N are put back, and the text is split
    at the separator: every piece then starts a kept element, which ends at the first marker. Python touches
    only the kept elements."""
    if b"\x00" in data:
        return _kept_pieces_slow(data, sep)
    prefixes = _skip_prefixes(data[:SAMPLE_BYTES], sep, known)
    marked = data
    for i, (prefix, named) in enumerate(prefixes):
        marker = b"\x00" + bytes([i + 1])
        marked = marked.replace(prefix, marker)
        if named:  # an operator category: ProfilerStep#N is kept
            marked = marked.replace(marker + _STEP_BYTES, prefix + _STEP_BYTES)
    pieces = marked.split(sep)
    first = pieces[0]
    pieces[0] = first[first.index(b"{") + 1 :]
    out = []
    for piece in pieces:
        cut = piece.find(b"\x00")
        out.append(piece if cut < 0 else piece[:cut])
    if b"\x00" not in pieces[-1]:
        out[-1] = out[-1][: out[-1].rindex(b"}")]
    return out


def _kept_spans(data: bytes, sep: bytes, braces: Any, known: dict[bytes, bool] | None = None) -> _Kept:
    """`_kept_pieces(data, sep, known)` and the number of elements in `data` (`data.count(sep) + 1`), found with numpy
    from the positions of `}` in `data` (`braces`); None where `_kept_pieces` must decide (NUL bytes in the text,
    a first or last element without its brace, a separator shorter than a word).

    The separators are the `}` followed by the rest of `sep` (it holds one `}` and cannot overlap itself, so
    these are exactly the occurrences `split` finds); an element after a separator is skipped when it starts with
    one of the learned prefixes of `_skip_prefixes` (an operator's unless ProfilerStep# follows), as
    `_kept_pieces` replaces them; a kept element ends where the next separator starts (or at the batch's last
    `}`). The comparisons read 8 bytes at a time at every candidate at once; numpy releases the GIL meanwhile."""
    np = _numpy()
    n = len(data)
    w = len(sep)
    if w < 8 or n < 64 or b"\x00" in data:
        return None
    a = np.frombuffer(data, dtype=np.uint8)
    words = np.ndarray((n - 7,), dtype=np.dtype("<u8"), buffer=data, strides=(1,))  # 8 bytes at every offset
    anchor = sep.index(b"}")
    pos = braces[(braces >= anchor) & (braces <= n - w + anchor)] - anchor
    pos = pos[a[pos + anchor + 1] == sep[anchor + 1]]
    for off in _word_offsets(w):
        pos = pos[words[pos + off] == _word(sep, off)]
    body = pos + w  # where each element after a separator starts (after its `{`)
    skip = np.zeros(len(pos), dtype=bool)
    for prefix, named in _skip_prefixes(data[:SAMPLE_BYTES], sep, known):
        tail = prefix[w:]
        m = len(tail)
        if m < 8:
            return None
        at = np.flatnonzero(~skip & (body + m <= n))
        for off in _word_offsets(m):
            at = at[words[body[at] + off] == _word(tail, off)]
        if named:  # an operator category: ProfilerStep# is kept
            step = at[body[at] + m + len(_STEP_BYTES) <= n]
            for off in _word_offsets(len(_STEP_BYTES)):
                step = step[words[body[step] + m + off] == _word(_STEP_BYTES, off)]
            at = np.setdiff1d(at, step, assume_unique=True)
        skip[at] = True
    first = data.find(b"{")
    last = data.rfind(b"}")
    if first < 0 or (len(pos) and first >= pos[0]):
        return None
    keep = ~skip
    starts = body[keep].tolist()
    ends = np.append(pos[1:], last)[keep].tolist()
    if (starts and ends[-1] < starts[-1]) or (not len(pos) and last <= first):
        return None  # the last element holds no `}`: `_kept_pieces` fails on it as it always did
    pieces = [data[first + 1 : pos[0] if len(pos) else last]]
    pieces += [data[s:e] for s, e in zip(starts, ends, strict=True)]
    return pieces, len(pos) + 1


def _numpy() -> Any:
    import numpy

    return numpy


@functools.cache
def _word_offsets(length: int) -> tuple[int, ...]:
    """Offsets of the 8-byte words that cover `length` bytes (the last one may overlap the one before)."""
    return (*range(0, length - 7, 8), length - 8) if length % 8 else tuple(range(0, length, 8))


@functools.cache
def _word(text: bytes, off: int) -> int:
    """The little-endian 8-byte word of `text` at `off` (as numpy reads it)."""
    return int.from_bytes(text[off : off + 8], "little")


def _kept_pieces_slow(data: bytes, sep: bytes) -> list[bytes]:
    """`_kept_pieces` with the regular expression at every separator (for text holding NUL bytes)."""
    first = data.index(b"{") + 1
    starts = [first, *(m.end() for m in _skip_pattern(sep).finditer(data, first))]
    find = data.find
    last = data.rindex(b"}")
    pieces = []
    for s in starts:
        e = find(sep, s)
        pieces.append(data[s : e if e >= 0 else last])
    return pieces


# Bytes of each batch searched for the prefixes of skipped elements; a prefix not seen there only costs speed.
SAMPLE_BYTES = 64 << 10
# Prefixes of skipped elements used at most (per batch, or per stream when kept across batches).
MAX_PREFIXES = 250
_STEP_BYTES = PROFILER_STEP_PREFIX.encode()


def _skip_prefixes(sample: bytes, sep: bytes, known: dict[bytes, bool] | None = None) -> list[tuple[bytes, bool]]:
    """Distinct exact prefixes of skipped elements in `sample` (at most MAX_PREFIXES): (separator + keys up to the
    category, up to the opening quote of an operator's name, or up to a flow's phase; whether it is an operator
    prefix). `known`: prefixes learned before (from other batches): those of `sample` are added to it, and all
    are returned (any of them is exact wherever it is found: it is a match of `_skip_prefix_pattern`)."""
    found: dict[bytes, bool] = {} if known is None else known
    # findall (one tuple of groups per match, built in C) then the distinct ones in order: a Python step per
    # match cost 0.5 s per GB of trace.
    for other, operator, flow in dict.fromkeys(_skip_prefix_pattern(sep).findall(sample)):
        if len(found) >= MAX_PREFIXES:
            break
        found.setdefault(sep + (other or operator or flow), bool(operator))
    return list(found.items())


def _skip_alternatives() -> tuple[bytes, bytes, bytes]:
    """Regular expressions (bytes) for the first keys of elements the tables do not use: (a category not in
    `_DISPATCH` as second key; an operator category as second key, name as third; a flow event (ph s, t or f)
    whatever its category)."""
    ours = b"|".join(re.escape(c.encode()) for c in _DISPATCH)
    steps = b"|".join(re.escape(c.encode()) for c in STEP_OP_CATS)
    # No raw newline in the "ph" and "cat" strings: every separator holds one, so a prefix never runs across a
    # separator (a damaged string, left open, otherwise swallowed the separators up to the next quote: `_kept_pieces`
    # then hid the elements after them in a skipped prefix where `_kept_spans` and the batch cuts see separators).
    other = rb'\s*"ph":\s*"[^"\\\n]*",\s*"cat":\s*"(?!(?:' + ours + rb')")[^"\\\n]*",'
    operator = rb'\s*"ph":\s*"[^"\\\n]*",\s*"cat":\s*"(?:' + steps + rb')",\s*"name":\s*"'
    flow = rb'\s*"ph":\s*"[' + b"".join(FLOW_PHASES_BYTES) + rb']",'
    return other, operator, flow


@functools.cache
def _skip_pattern(sep: bytes) -> re.Pattern[bytes]:
    """A separator followed by an element that may be kept: not recognised by its first keys, as Kineto (and
    pretty-printers) write them, as one the tables do not use (see `_skip_alternatives`; an operator named
    ProfilerStep#N is kept). Anything else, whatever its layout, is parsed."""
    other, operator, flow = _skip_alternatives()
    step = re.escape(_STEP_BYTES)
    return re.compile(re.escape(sep) + rb"(?!" + other + rb"|" + operator + rb"(?!" + step + rb")|" + flow + rb")")


@functools.cache
def _skip_prefix_pattern(sep: bytes) -> re.Pattern[bytes]:
    """A separator and the first keys of an element the tables do not use, in groups 1 (other category), 2
    (operator) and 3 (flow)."""
    other, operator, flow = _skip_alternatives()
    return re.compile(re.escape(sep) + rb"(?:(" + other + rb")|(" + operator + rb")|(" + flow + rb"))")


# ================================================================== typed field access
def _i32(v: Any) -> int | None:
    """An INTEGER column value: ints (and integral floats) within int32, else None."""
    if type(v) is float and v.is_integer():
        v = int(v)
    if type(v) is int and -_INT32 <= v < _INT32:
        return v
    return None


def _i64(v: Any) -> int | None:
    """A BIGINT column value: ints (and integral floats) within int64, else None."""
    if type(v) is float and v.is_integer():
        v = int(v)
    if type(v) is int and -_INT64 <= v < _INT64:
        return v
    return None


def _os_id(v: Any) -> int | None:
    """A process/thread id: an int, or a string of digits (2021 traces write CPU tids as "25738"); names such
    as "stream 7" or "Traces" give None."""
    if type(v) is str and v.isdigit():
        v = int(v)
    return _i64(v)


def _stream_of_tid(v: Any) -> int | None:
    """The stream id of a GPU event's tid: 7 (current format) or "stream 7" (2021 format)."""
    if type(v) is str and v.startswith("stream "):
        v = v[7:]
        if v.isdigit():
            return _i64(int(v))
        return None
    return _i64(v)


# ================================================================== building the tables
_KERNEL_COLUMNS = (
    "name device_id stream_id start_ns end_ns grid_x grid_y grid_z block_x block_y block_z "
    "registers_per_thread smem_bytes correlation_id"
).split()
_MEMOP_COLUMNS = "kind name device_id stream_id start_ns end_ns bytes correlation_id".split()
_LAUNCH_COLUMNS = "correlation_id name start_ns end_ns process_id thread_id".split()
_RANGE_COLUMNS = "name kind side start_ns end_ns process_id thread_id device_id stream_id".split()


@dataclass
class _Tables:
    """Column lists under construction, and what was skipped (category label -> reason -> count)."""

    kernels: Columns = field(default_factory=lambda: {c: [] for c in _KERNEL_COLUMNS})
    memops: Columns = field(default_factory=lambda: {c: [] for c in _MEMOP_COLUMNS})
    launches: Columns = field(default_factory=lambda: {c: [] for c in _LAUNCH_COLUMNS})
    ranges: Columns = field(default_factory=lambda: {c: [] for c in _RANGE_COLUMNS})
    collectives: Columns = field(default_factory=collective_args.empty)
    host_ops: HostOps = field(default_factory=HostOps)
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)
    names: dict[str, str] = field(default_factory=dict)  # each distinct name once (memory)


def _read_events(events: list[Any], t: _Tables) -> None:
    """One pass over traceEvents, filling `t`; launches are filtered by correlation afterwards.

    The hot loop of the reader (10^5-10^6 events per run): checks are inlined (`_span` spelled out), the columns'
    appends bound once, and the common case of each integer column (an int in range) is tested inline before the
    helper (`_i32`, `_i64`, ...) that decides the rest (a kernel's row: 4.5 us instead of 7.2 with the helpers
    called); repeated names are stored once (`t.names`)."""
    dispatch = _DISPATCH
    flows = FLOW_PHASES
    skipped = t.skipped
    intern = t.names.setdefault
    k, m, r, coll = t.kernels, t.memops, t.ranges, t.collectives
    collective, coll_key = collective_args.add, collective_args.KEY
    la_corr, la_name, la_start, la_end, la_pid, la_tid = (t.launches[c].append for c in _LAUNCH_COLUMNS)
    (k_name, k_dev, k_stream, k_start, k_end, k_gx, k_gy, k_gz, k_bx, k_by, k_bz, k_regs, k_smem,
     k_corr) = (k[c].append for c in _KERNEL_COLUMNS)
    m_kind, m_name, m_dev, m_stream, m_start, m_end, m_bytes, m_corr = (m[c].append for c in _MEMOP_COLUMNS)
    r_name, r_kind, r_side, r_start, r_end, r_pid, r_tid, r_dev, r_stream = (r[c].append for c in _RANGE_COLUMNS)
    lo, hi = -_INT64, _INT64
    lo32, hi32 = -_INT32, _INT32
    empty: dict[str, Any] = {}
    not_objects = 0
    for e in events:
        if type(e) is not dict:
            not_objects += 1
            continue
        cat = e.get("cat")
        if type(cat) is not str:
            continue
        what = dispatch.get(cat)
        if what is None:
            continue
        ph = e.get("ph")
        if type(ph) is str and ph in flows:
            continue
        name = e.get("name")
        if type(name) is not str:
            if what != _STEP_OP:
                skipped[(cat, "missing or non-string name")] += 1
            continue
        if what == _STEP_OP and not name.startswith(PROFILER_STEP_PREFIX):
            continue
        # _span, inlined
        ts = e.get("ts")
        dur = e.get("dur")
        if (type(ts) is not float and type(ts) is not int) or (type(dur) is not float and type(dur) is not int):
            skipped[(cat, "missing or non-numeric ts/dur")] += 1
            continue
        try:
            start = round(ts * 1000)
            end = round(dur * 1000)
        except (OverflowError, ValueError):
            skipped[(cat, "non-finite ts/dur")] += 1
            continue
        if end < 0:
            skipped[(cat, "negative duration")] += 1
            continue
        end += start
        if start < lo or end >= hi:
            skipped[(cat, "timestamp out of range")] += 1
            continue
        args = e.get("args")
        if type(args) is not dict:
            args = empty
        if what == _LAUNCH:
            corr = args.get("correlation")
            if type(corr) is not int or not lo <= corr < hi:
                corr = _i64(corr)
                if corr is None:
                    continue
            pid, tid = e.get("pid"), e.get("tid")
            la_corr(corr)
            la_name(intern(name, name))
            la_start(start)
            la_end(end)
            la_pid(pid if type(pid) is int and lo <= pid < hi else _os_id(pid))
            la_tid(tid if type(tid) is int and lo <= tid < hi else _os_id(tid))
        elif what == _KERNEL:
            v = args.get("device", e.get("pid"))
            k_dev(v if type(v) is int and lo32 <= v < hi32 else _i32(v))
            v = args.get("stream")
            if type(v) is not int or not lo <= v < hi:
                v = _i64(v) if v is not None else _stream_of_tid(e.get("tid"))
            k_stream(v)
            k_name(intern(name, name))
            k_start(start)
            k_end(end)
            g = args.get("grid")
            if type(g) is list and len(g) == 3:
                x, y, z = g
                k_gx(x if type(x) is int and lo32 <= x < hi32 else _i32(x))
                k_gy(y if type(y) is int and lo32 <= y < hi32 else _i32(y))
                k_gz(z if type(z) is int and lo32 <= z < hi32 else _i32(z))
            else:
                k_gx(None)
                k_gy(None)
                k_gz(None)
            g = args.get("block")
            if type(g) is list and len(g) == 3:
                x, y, z = g
                k_bx(x if type(x) is int and lo32 <= x < hi32 else _i32(x))
                k_by(y if type(y) is int and lo32 <= y < hi32 else _i32(y))
                k_bz(z if type(z) is int and lo32 <= z < hi32 else _i32(z))
            else:
                k_bx(None)
                k_by(None)
                k_bz(None)
            v = args.get("registers per thread")
            k_regs(v if type(v) is int and lo32 <= v < hi32 else _i32(v))
            v = args.get("shared memory")  # static + dynamic; Kineto gives only the sum
            k_smem(v if type(v) is int and lo32 <= v < hi32 else _i32(v))
            v = args.get("correlation")
            k_corr(v if type(v) is int and lo <= v < hi else _i64(v))
            if coll_key in args:  # what torch.distributed recorded on a collective's kernel
                collective(coll, args)
        elif what == _MEMOP:
            # peer copies (CUpti_ActivityMemcpy2) name the executing device "inDevice"
            v = args.get("device", args.get("inDevice", e.get("pid")))
            m_dev(v if type(v) is int and lo32 <= v < hi32 else _i32(v))
            v = args.get("stream")
            if type(v) is not int or not lo <= v < hi:
                v = _i64(v) if v is not None else _stream_of_tid(e.get("tid"))
            m_stream(v)
            m_kind(MEMOP_CATS[cat])
            m_name(intern(name, name))
            m_start(start)
            m_end(end)
            v = args.get("bytes")
            m_bytes(v if type(v) is int and lo <= v < hi else _i64(v))
            v = args.get("correlation")
            m_corr(v if type(v) is int and lo <= v < hi else _i64(v))
        else:
            kind, side = ("profiler_step", "cpu") if what == _STEP_OP else RANGE_CATS[cat]
            if side == "cpu" and name.startswith(PROFILER_STEP_PREFIX):
                kind = "profiler_step"
            r_name(intern(name, name))
            r_kind(kind)
            r_side(side)
            r_start(start)
            r_end(end)
            if side == "cpu":
                r_pid(_os_id(e.get("pid")))
                r_tid(_os_id(e.get("tid")))
                r_dev(None)
                r_stream(None)
            else:
                v = args.get("stream")
                r_pid(None)
                r_tid(None)
                r_dev(_i32(args.get("device", e.get("pid"))))
                r_stream(_i64(v) if v is not None else _stream_of_tid(e.get("tid")))
    if not_objects:
        skipped[("traceEvents", "not a JSON object")] += not_objects


def _keep_launches_of_gpu_work(t: _Tables) -> None:
    """Keep only the host API calls whose correlation id matches a kernel or memory operation."""
    gpu = set(t.kernels["correlation_id"])
    gpu.update(t.memops["correlation_id"])
    la = t.launches
    keep = [i for i, c in enumerate(la["correlation_id"]) if c in gpu]
    if len(keep) != len(la["correlation_id"]):
        t.launches = {c: [col[i] for i in keep] for c, col in la.items()}


def _graph_replays(t: _Tables) -> Columns | None:
    """The graph_replays rows: one per graph-launching host call (cudaGraphLaunch, hipGraphLaunch, ...) that
    launched GPU work; the kernels (and memory operations) it replayed carry its correlation id. Nothing to do,
    and no pass over the kernels, in a trace without graph launches."""
    la = t.launches
    names = graph_launch_names(la["name"])
    if not names:
        return None
    calls: dict[int, HostCall] = {}
    for corr, name, start, end, pid, tid in zip(*(la[c] for c in _LAUNCH_COLUMNS), strict=True):
        if name in names and corr not in calls:
            calls[corr] = HostCall(name, start, end, pid, tid)
    work = {corr: Work() for corr in calls}
    for table, kernel in ((t.kernels, True), (t.memops, False)):
        for corr, start, end, dev, stream in zip(table["correlation_id"], table["start_ns"], table["end_ns"],
                                                 table["device_id"], table["stream_id"], strict=True):
            w = work.get(corr)
            if w is not None:
                w.add(start, end, dev, stream, kernel)
    # Kernel rows do not name their process: replays are keyed by correlation id alone.
    return replay_columns({(None, c): v for c, v in calls.items()}, {(None, c): v for c, v in work.items()})


def _run_context(info: Any, ingest: Ingest) -> None:
    """rank, world_size, backend and process groups from the header's distributedInfo (torch.distributed's view
    of the run: {"backend": "nccl", "rank": 0, "world_size": 4, "pg_config": [...], ...}); absent keys stay None."""
    if type(info) is not dict:
        return
    ingest.rank = _i32(info.get("rank"))
    ingest.world_size = _i32(info.get("world_size"))
    backend = info.get("backend")
    ingest.dist_backend = backend if type(backend) is str and backend else None
    groups = info.get("pg_config")
    if type(groups) is list:
        ingest.process_groups = orjson.dumps(groups).decode()


def _devices(props: Any, warnings: list[str]) -> Columns | None:
    """The devices table from the header's deviceProperties (a list of objects with an integer `id`)."""
    if props is None:
        return None
    if type(props) is not list:
        warnings.append("deviceProperties is not a list; no device properties read")
        return None
    cols: Columns = {"device_id": [], **{c: [] for c in DEVICE_PROPERTIES}}
    seen: set[int] = set()
    bad = 0
    non_positive = 0
    for p in props:
        dev = _i32(p.get("id")) if type(p) is dict else None
        if dev is None or dev in seen:
            bad += 1
            continue
        seen.add(dev)
        cols["device_id"].append(dev)
        for col, key in DEVICE_PROPERTIES.items():
            v = p.get(key)
            if col == "name":
                cols[col].append(v if type(v) is str else None)
            else:
                n = _i64(v) if col.endswith("_bytes") else _i32(v)
                if n is not None and n < (0 if col in NON_POSITIVE_OK else 1):
                    non_positive += 1
                    n = None
                cols[col].append(n)
    if bad:
        warnings.append(f"{bad} deviceProperties entries skipped: not an object with a new integer id")
    if non_positive:
        warnings.append(f"{non_positive} deviceProperties values not positive (numSms, warpSize, ...) read as unknown")
    return cols


def _tool_version(doc: dict[str, Any]) -> str | None:
    for key, label in TOOL_VERSION_KEYS:
        v = doc.get(key)
        if type(v) in (int, str):
            return f"{label} {v}"
    return None


def from_document(doc: dict[str, Any], path: Path) -> Ingest:
    """Turn a parsed Kineto trace (a JSON object with `traceEvents`) into the normalized tables: devices (from
    deviceProperties), kernels, memops, launches (host calls that launched them) and ranges (record_function
    annotations, ProfilerStep#N, and their GPU projections). Unusable events are skipped and counted in
    `Ingest.warnings`, never fatal."""
    events = doc.get("traceEvents")
    if type(events) is not list:
        raise FormatError(f"{path}: traceEvents is not a list of events")
    t = _Tables()
    _read_events(events, t)
    t.host_ops.add_events(events)
    repairs = doc.get(REPAIRS_KEY)
    return _to_ingest(doc, t, path, list(repairs) if type(repairs) is list else [])


def _to_ingest(doc: dict[str, Any], t: _Tables, path: Path, repairs: list[str]) -> Ingest:
    """The Ingest of a trace whose events were read into `t`; `doc` gives the header keys."""
    version = doc.get("schemaVersion")
    ingest = Ingest(
        format="kineto",
        format_version=str(version) if type(version) in (int, str) else None,
        tool_version=_tool_version(doc),
    )
    warnings = ingest.warnings
    warnings.extend(f"repaired JSON: {r}" for r in repairs)
    devices = _devices(doc.get("deviceProperties"), warnings)
    _keep_launches_of_gpu_work(t)
    _run_context(doc.get("distributedInfo"), ingest)
    for (cat, reason), n in sorted(t.skipped.items()):
        what = "traceEvents entries" if cat == "traceEvents" else f"'{cat}' events"
        warnings.append(f"{n} {what} skipped: {reason}")
    if not t.kernels["name"] and not t.memops["name"]:
        warnings.append("no GPU kernels or memory operations in the trace (profiled without ProfilerActivity.CUDA?)")
    tables = {"devices": devices, "kernels": t.kernels, "memops": t.memops, "launches": t.launches,
              "graph_replays": _graph_replays(t), "ranges": t.ranges, "collectives": t.collectives,
              "host_ops": t.host_ops.columns()}
    ingest.tables = {name: cols for name, cols in tables.items() if cols and next(iter(cols.values()))}
    return ingest
