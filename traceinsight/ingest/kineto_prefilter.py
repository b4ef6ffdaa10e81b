"""Which elements of a batch of Kineto traceEvents are parsed: those not recognised, from their first bytes, as
events the tables do not use (categories outside `kineto_events.DISPATCH`, operators other than ProfilerStep#N,
flows). The exact prefixes of skipped elements are learned from each batch's first SAMPLE_BYTES (`learn`) and
found either with numpy (`_kept_spans`, 8 bytes at a time at every separator) or with bytes.replace and split
(`_kept_pieces`, where numpy cannot decide); `kept_elements` is the one entry both readers use.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from traceinsight.ingest.json_stream import Batch
from traceinsight.ingest.kineto_events import DISPATCH, FLOW_PHASES_BYTES, PROFILER_STEP_PREFIX, STEP_OP_CATS

# A batch's kept elements, found ahead of parsing: (their insides, the number of elements in the batch), or None
# where `_kept_spans` leaves the batch to `_kept_pieces`.
Kept = tuple[list[bytes], int] | None


def learn(known: dict[bytes, dict[bytes, bool]], batch: Batch) -> dict[bytes, bool] | None:
    """The prefixes of skipped elements learned up to `batch` (its first SAMPLE_BYTES included), for a batch with
    a separator (None for the others): the serial and the parallel reader learn alike, so that which elements are
    parsed does not depend on the number of workers."""
    if batch.sep is None:
        return None
    learned = known.setdefault(batch.sep, {})
    _skip_prefixes(batch.data[:SAMPLE_BYTES], batch.sep, learned)
    return learned


def kept_elements(batch: Batch, learned: dict[bytes, bool] | None) -> Kept:
    """The kept elements of `batch` and its element count, `learned` the prefixes of skipped elements learned up to
    it (`learn`): found by numpy (`_kept_spans`) where it decides, else by the byte scan (`_kept_pieces`), which
    give the same; None for a batch without a separator (parsed whole). The serial reader's scanning thread, the
    workers and `kineto_batch.batch_events` all decide here."""
    sep = batch.sep
    if sep is None or learned is None:
        return None
    kept = _kept_spans(batch.data, sep, batch.braces, learned) if batch.braces is not None else None
    return kept if kept is not None else (_kept_pieces(batch.data, sep, learned), batch.data.count(sep) + 1)


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
            marked = marked.replace(marker + STEP_BYTES, prefix + STEP_BYTES)
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


def _kept_spans(data: bytes, sep: bytes, braces: Any, known: dict[bytes, bool] | None = None) -> Kept:
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
            step = at[body[at] + m + len(STEP_BYTES) <= n]
            for off in _word_offsets(len(STEP_BYTES)):
                step = step[words[body[step] + m + off] == _word(STEP_BYTES, off)]
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
STEP_BYTES = PROFILER_STEP_PREFIX.encode()


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
    `DISPATCH` as second key; an operator category as second key, name as third; a flow event (ph s, t or f)
    whatever its category)."""
    ours = b"|".join(re.escape(c.encode()) for c in DISPATCH)
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
    step = re.escape(STEP_BYTES)
    return re.compile(re.escape(sep) + rb"(?!" + other + rb"|" + operator + rb"(?!" + step + rb")|" + flow + rb")")


@functools.cache
def _skip_prefix_pattern(sep: bytes) -> re.Pattern[bytes]:
    """A separator and the first keys of an element the tables do not use, in groups 1 (other category), 2
    (operator) and 3 (flow)."""
    other, operator, flow = _skip_alternatives()
    return re.compile(re.escape(sep) + rb"(?:(" + other + rb")|(" + operator + rb")|(" + flow + rb"))")
