"""Reading the elements of one large array inside a JSON document as a stream, in batches of raw bytes.

A Kineto trace is one JSON object whose `traceEvents` array holds nearly all of its bytes. Parsing it whole
needs about ten times its size in memory; here the (gunzipped) bytes are read in chunks (`byte_stream.byte_chunks`), the
array is located with a small token scanner (strings, escapes and bracket depth), and the array body is cut into
batches of complete elements at the separator the writer used between elements (`\\n  },\\n  {` for Kineto:
the whitespace seen before the first element, around `},`). Such a separator cannot occur inside a string of
valid JSON (strings hold no raw newline) and a pretty-printer indents nested objects deeper, so a cut there is
exact; compact separators (`},{`) are validated by parsing the batch. Memory stays at a few chunks plus what the
caller keeps of each batch. The rest of the document (the keys before and after the array) is returned with the
array replaced by `[]`, for the caller to parse (it is small).

Byte offsets in messages count from the start of the decompressed document after a UTF-8 byte-order mark.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import orjson

from traceinsight.errors import FormatError

# A header (everything before the array) longer than this is not a trace layout we stream; nor is whitespace
# this long before the first element, or keys after the array this long (real ones are a few hundred bytes).
MAX_HEADER_BYTES = 64 << 20
MAX_REST_BYTES = 512 << 20
# A string (complete), a lone quote (a string cut by the end of the buffer), or a bracket/brace/comma.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|"|[\[\]{},]')
_KEY_COLON = re.compile(rb"\s*:\s*")
_WS = b" \t\r\n"


# ================================================================== the document around the array
@dataclass
class Batch:
    """Complete elements of the array: `data` is the bytes between two separators (no brackets around);
    `offset` its position in the document; `sep` the exact element separator when the layout has one (then
    every element but the first starts right after an occurrence of `sep`), else None."""

    data: bytes
    offset: int
    sep: bytes | None
    # Positions of every `}` in `data` (a numpy int64 array), when the stream computed them (batches cut at a
    # separator): the Kineto reader finds the separators among them.
    braces: Any = None


class NotAnArray(Exception):
    """The document is not an object whose key holds an array (raised before any batch was produced)."""


# Tokens that matter to the header scan: strings (a lone quote: one cut by the buffer's end) and brackets.
_HEADER_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|"|[\[\]{}]')


class _HeaderScan:
    """Finds the `[` of top-level `key` in a buffer that grows at its end, resuming where the last call stopped
    (a document without the key, such as a large sidecar, is scanned once, not once per chunk)."""

    def __init__(self, key: bytes) -> None:
        self.quoted = b'"' + key + b'"'
        self.pos: int | None = None  # where to resume (None: the object's `{` not seen yet)
        self.depth = 0

    def __call__(self, buf: bytes) -> int | str:
        """Index just after the `[` of `key` in `buf`; or 'more' (need more bytes), 'absent' (not a JSON
        object, or the object ends without the key), 'not_array' (the key holds something else)."""
        n = len(buf)
        if self.pos is None:
            i = 0
            while i < n and buf[i] in _WS:
                i += 1
            if i == n:
                return "more"
            if buf[i] != 0x7B:  # '{'
                return "absent"
            self.pos = i
        for m in _HEADER_TOKEN.finditer(buf, self.pos):
            tok = m.group()
            c = tok[0]
            if c == 0x22:  # '"'
                if len(tok) == 1:
                    self.pos = m.start()  # a string cut by the buffer's end: rescan it with more bytes
                    return "more"
                if self.depth == 1 and tok == self.quoted:
                    colon = _KEY_COLON.match(buf, m.end())
                    if colon is None:
                        continue
                    j = colon.end()
                    if j >= n:
                        self.pos = m.start()
                        return "more"
                    return j + 1 if buf[j] == 0x5B else "not_array"  # '['
            elif c in (0x7B, 0x5B):
                self.depth += 1
            elif c in (0x7D, 0x5D):
                self.depth -= 1
                if self.depth == 0:
                    return "absent"
            self.pos = m.end()
        return "more"


def _scan_header(buf: bytes, key: bytes) -> int | str:
    """`_HeaderScan` of `buf` in one call (the whole buffer at once)."""
    return _HeaderScan(key)(buf)


def _elements_end(data: bytes) -> tuple[int, int | None]:
    """Exact scan of array elements in `data` (which starts inside the array, between elements): returns
    (end of the last complete element followed by a comma, index of the `]` closing the array or None).
    A Python loop over tokens: used only where the fast paths could not decide."""
    depth = 0
    last = 0
    for m in _TOKEN.finditer(data):
        tok = m.group()
        c = tok[0]
        if c == 0x22:
            if len(tok) == 1:
                break
        elif c == 0x2C:  # ','
            if depth == 0:
                last = m.start()
        elif c in (0x7B, 0x5B):
            depth += 1
        else:
            depth -= 1
            if depth < 0:
                return last, m.start()
    return last, None


def _complete_end(data: bytes) -> int:
    """End of the last complete element in `data` (which starts inside the array, between elements and holds
    no `]` closing it): after its closing brace or bracket, or before the comma that follows a scalar; 0 if
    none. A Python loop over tokens: used only for data cut short."""
    depth = 0
    last = 0
    for m in _TOKEN.finditer(data):
        tok = m.group()
        c = tok[0]
        if c == 0x22:
            if len(tok) == 1:
                break
        elif c == 0x2C:  # ','
            if depth == 0:  # after a scalar element (after an object, `last` is already past it)
                last += len(data[last : m.start()].rstrip(_WS))
        elif c in (0x7B, 0x5B):
            depth += 1
        else:
            depth -= 1
            if depth < 0:
                break
            if depth == 0:
                last = m.end()
    return last


class ArrayStream:
    """Iterate over the elements of the array under top-level `key` of the JSON object in `chunks`, as Batches;
    afterwards `rest` holds the document with that array emptied (`{..., "key": [], ...}` as bytes) and
    `rest_offsets` maps positions in `rest` back to the document (for messages)."""

    def __init__(self, path: Path, chunks: Iterator[bytes], key: bytes) -> None:
        self.path = path
        self.chunks = chunks
        self.key = key
        self.rest = b""
        self.array_end: int | None = None  # document offset of the closing bracket
        self.prefix_len = 0
        self.cut_at: int | None = None  # document offset where the data ends, when it ends inside the array
        self.batches_yielded = 0

    def _more(self) -> bytes | None:
        return next(self.chunks, None)

    def batches(self) -> Iterator[Batch]:
        for batch in self._batches():
            self.batches_yielded += 1
            yield batch

    def _salvage(self, prefix: bytes, buf: bytes, offset: int) -> Iterator[Batch]:
        """The data ends inside the array (`buf`, at document `offset`, holds what follows the last batch): yield
        the complete elements in `buf`, set `cut_at`, and leave as `rest` the keys before the array with the
        array and object closed. Nothing complete before the cut raises the one-line FormatError."""
        last = _complete_end(buf)
        if last == 0 and self.batches_yielded == 0:
            self._fail(buf, offset, "the data ends early: truncated file?")
        self.cut_at = offset + len(buf)
        if buf[:last].strip(_WS):
            yield Batch(buf[:last], offset, None)
        self.prefix_len = len(prefix)
        self.rest = prefix + b"]}"

    def _batches(self) -> Iterator[Batch]:
        buf = b""
        scan = _HeaderScan(self.key)
        while True:
            found = scan(buf)
            if isinstance(found, int):
                break
            if found != "more" or len(buf) > MAX_HEADER_BYTES:
                raise NotAnArray(found)
            more = self._more()
            if more is None:
                raise NotAnArray("absent")
            buf += more
        prefix = buf[:found]
        self.prefix_len = found
        offset = found  # document offset of buf[0] from here on
        buf = buf[found:]
        # The whitespace before the first element gives the element separator.
        while True:
            body = buf.lstrip(_WS)
            if body:
                break
            more = self._more()
            if more is None:
                self._fail(buf, offset, "the data ends early: truncated file?")
            if len(buf) > MAX_HEADER_BYTES:  # not a layout to stream: the whole-document reader explains it
                raise NotAnArray("blank")
            buf += more
        lead = buf[: len(buf) - len(body)]
        if body[:1] == b"]":
            self._finish(prefix, buf, offset, offset + len(lead))
            return
        sep = lead + b"}," + lead + b"{" if b"\n" in lead else None
        eof = False
        while True:
            cut = self._cut(buf, sep)
            if cut is not None:
                batch, nxt = buf[:cut], cut + 1
                # A batch must not hold the end of the array (possible where the keys after the array repeat
                # the separator): look for `}` `]` then `,` or `}`, and if found check the batch by parsing it.
                braces = _braces(batch)
                if not _closes_array(batch, braces) or _is_element_list(batch):
                    yield Batch(batch, offset, sep, braces)
                    buf = buf[nxt:]
                    offset += nxt
                    continue
                end = self._array_end(buf)
                if end is None:  # damaged JSON: the reader's lenient parser explains or repairs it
                    yield Batch(batch, offset, sep)
                    buf = buf[nxt:]
                    offset += nxt
                    continue
                break
            if not eof:
                more = self._more()
                if more is None:
                    eof = True
                else:
                    buf += more
                    continue
            end = self._array_end(buf)
            if end is None:
                yield from self._salvage(prefix, buf, offset)
                return
            break
        # The array ends at buf[end]: the elements before it, then the rest of the document.
        if buf[:end].strip(_WS):
            yield Batch(buf[:end].rstrip(_WS), offset, None)
        self._finish(prefix, buf, offset, offset + end)

    @staticmethod
    def _cut(buf: bytes, sep: bytes | None) -> int | None:
        """Index of the comma after the last complete element in `buf` found by the separator, or None."""
        if sep is not None:
            i = buf.rfind(sep)
            if i <= 0:
                return None
            k = sep.index(b",")
            return i + k
        # Compact layouts: the last `}` `,` `{` (validated later by parsing the batch).
        for pat in (b"},{", b"}, {", b"},\n{"):
            i = buf.rfind(pat)
            if i > 0:
                return i + 1
        return None

    @staticmethod
    def _array_end(buf: bytes) -> int | None:
        """Index in `buf` (which starts between elements) of the `]` that closes the array, or None when the
        array does not close in `buf` or its JSON is damaged before."""
        try:
            orjson.loads(b"[" + buf)
        except orjson.JSONDecodeError as exc:
            if exc.msg == "unexpected content after document":
                # exc.pos counts characters; the text up to it is valid UTF-8.
                text = (b"[" + buf).decode("utf-8", "replace")
                return buf.rindex(b"]", 0, len(text[: exc.pos].encode()) - 1)
        else:  # the document ends right after the array (its closing brace is missing: reported later)
            return buf.rstrip(_WS).rindex(b"]")
        return _elements_end(buf)[1]

    def _fail(self, buf: bytes, offset: int, hint: str) -> NoReturn:
        import json

        text = "[" + buf.decode("utf-8", "replace")
        try:
            json.JSONDecoder(strict=False, parse_int=str).raw_decode(text)  # str: only where it fails matters
            msg, at = "the array is not closed", offset + len(buf)
        except json.JSONDecodeError as exc:
            msg = exc.msg
            at = offset + len(text[: exc.pos].encode()) - 1
            if text[exc.pos :].strip():
                hint = ""
        raise FormatError(f"{self.path}: not valid JSON at byte {at}: {msg}" + (f" ({hint})" if hint else ""))

    def _finish(self, prefix: bytes, buf: bytes, offset: int, closing: int) -> None:
        """Keep the document around the array: prefix + `]` + everything after the closing bracket."""
        self.array_end = closing
        tail = [buf[closing - offset :]]
        size = len(tail[0])
        for more in self.chunks:
            size += len(more)
            if size > MAX_REST_BYTES:
                raise FormatError(
                    f"{self.path}: more than {MAX_REST_BYTES >> 20} MiB of JSON after the {self.key.decode()} array "
                    "(a trace has a few keys there): not a trace layout traceinsight reads"
                )
            tail.append(more)
        self.rest = prefix + b"".join(tail)

    def rest_offset(self, pos: int) -> int:
        """Document offset of byte `pos` of `rest`."""
        if pos < self.prefix_len or self.array_end is None:
            return pos
        return self.array_end + (pos - self.prefix_len)


# The end of the array inside a batch: `}` then `]` then `,` or `}` (whitespace between).
_ARRAY_END = re.compile(rb"\}\s*\]\s*[,}]")


# Bytes `\s` matches in a bytes pattern; whitespace runs followed one step at a time by `_closes_array` (longer
# runs: the regular expression decides).
_SPACE_BYTES = b" \t\n\r\x0b\x0c"
_SPACE_STEPS = 64
_AFTER_BRACKET = re.compile(rb"\s*[,}]")


def _numpy() -> Any:
    import numpy

    return numpy


@functools.cache
def _space_table() -> Any:
    np = _numpy()
    table = np.zeros(256, dtype=bool)
    table[list(_SPACE_BYTES)] = True
    return table


def _braces(data: bytes) -> Any:
    """Positions of every `}` in `data` (numpy int64; numpy releases the GIL while it scans)."""
    np = _numpy()
    return np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 0x7D)


def _closes_array(data: bytes, braces: Any) -> bool:
    """`_ARRAY_END.search(data) is not None`, from the positions of `}` in `data`: whitespace after each `}` is
    skipped a step at a time over all of them at once (numpy), and only a `}` whitespace `]` found so is checked
    for the `,` or `}` that must follow. About six times cheaper than the regular expression, which tries every
    `}` of the batch in Python's regex engine while holding the GIL. A batch without `]` (memchr; three in four
    batches of the 1 GB replica: operators only) is decided without numpy."""
    if b"]" not in data:
        return False
    np = _numpy()
    a = np.frombuffer(data, dtype=np.uint8)
    n = len(a)
    space = _space_table()
    cur = braces + 1
    for _ in range(_SPACE_STEPS):
        cur = cur[cur < n]
        if not len(cur):
            return False
        c = a[cur]
        for q in cur[c == 0x5D].tolist():  # `}` whitespace* `]`
            if _AFTER_BRACKET.match(data, q + 1):
                return True
        cur = cur[space[c]] + 1
    return _ARRAY_END.search(data) is not None  # runs of whitespace longer than _SPACE_STEPS


def _is_element_list(batch: bytes) -> bool:
    try:
        return type(orjson.loads(b"[" + batch + b"]")) is list
    except orjson.JSONDecodeError:
        return False
