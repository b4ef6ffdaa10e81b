"""The lines of an Nsight Compute CSV export (plain or gzip-compressed) from its header on, without the
`==PROF==`/`==WARNING==` lines (and the application's own output) ncu prints before and among them."""

from __future__ import annotations

import codecs
import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

from traceinsight.errors import FormatError

HEADER_PREFIX = '"ID","Process ID","Process Name"'
_TOOL_LINE = re.compile(r"^==[A-Z]+==")


class ExportLines:
    """The export's lines from the header on (see `_csv_lines`), able to say whether any line is left."""

    def __init__(self, path: Path) -> None:
        self._it = _csv_lines(path)
        self._next: str | None = None
        self.last = ""  # the last line handed out

    def __iter__(self) -> ExportLines:
        return self

    def __next__(self) -> str:
        if self._next is not None:
            line, self._next = self._next, None
        else:
            line = next(self._it)
        self.last = line
        return line

    def at_end(self) -> bool:
        """Whether every line was handed out."""
        if self._next is None:
            try:
                self._next = next(self._it)
            except StopIteration:
                return True
        return False


def _csv_lines(path: Path) -> Iterator[str]:
    """The lines of the export (plain, or gzip-compressed as `detect` accepts it) from the header on, without
    ncu's own `==PROF==`-style lines."""
    with path.open("rb") as probe:
        packed = probe.read(2) == b"\x1f\x8b"
    try:
        with _gunzipped_lines(path) if packed else path.open("r", encoding="utf-8-sig", newline="") as fh:
            started = False
            for line in fh:
                if not started:
                    if line.startswith(HEADER_PREFIX):
                        started = True
                        yield line
                    continue
                if _TOOL_LINE.match(line) or not line.strip():
                    continue
                yield line
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: Nsight Compute CSV is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


@contextlib.contextmanager
def _gunzipped_lines(path: Path) -> Iterator[Iterator[str]]:
    """The lines (each with its '\n') of a gzip-compressed export, decompressed under the limits every gzip input
    has (byte_stream.byte_chunks: size and ratio, so a gzip bomb is a one-line LimitError; a damaged or cut stream
    a one-line FormatError)."""
    from traceinsight.ingest.byte_stream import Repairs, byte_chunks

    def lines() -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")()
        pieces: list[str] = []  # of the line not yet ended (kept apart: a long line is joined once)
        for chunk in byte_chunks(path, Repairs()):
            parts = decoder.decode(chunk).split("\n")
            if len(parts) > 1:
                yield "".join([*pieces, parts[0], "\n"])
                yield from (line + "\n" for line in parts[1:-1])
                pieces = []
            pieces.append(parts[-1])
        pieces.append(decoder.decode(b"", final=True))
        if last := "".join(pieces):
            yield last

    yield lines()
