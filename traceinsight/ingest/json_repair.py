"""Parsing JSON whole, leniently: the defects real Kineto files have (bare `inf`/`nan`, stray backslashes, lone
surrogates, control characters in strings, trailing data) repaired and counted, anything else a one-line
FormatError with the byte offset. The Kineto reader's slow path (`kineto.load_json`, and a batch orjson rejects).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from traceinsight.errors import FormatError
from traceinsight.ingest.byte_stream import Repairs, byte_chunks
from traceinsight.tuning import gc_paused

# Key under which `load_json` leaves, in the parsed document, what it had to repair (read by `from_document`).
REPAIRS_KEY = "__traceinsight_repairs__"

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
        doc = parse_text(data, repairs, path)
    if repairs and isinstance(doc, dict):
        doc[REPAIRS_KEY] = repairs.messages()
    return doc


def parse_text(data: bytes, repairs: Repairs, path: Path, offset: Callable[[int], int] | None = None) -> Any:
    """`data` parsed by orjson, else by `parse_leniently` with its repairs counted in `repairs` (trailing data
    included). What neither reads raises a one-line FormatError naming `path` and the byte offset, mapped through
    `offset` when `data` is a part of the file (the offset within `data` -> the offset in the file)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        doc, trailing = parse_leniently(data, repairs)
    except BadJSON as bad:
        at = bad.at if offset is None or bad.at is None else offset(bad.at)
        raise FormatError(BadJSON(at, bad.what, bad.hint).message(path, 0)) from None
    if trailing:
        repairs["trailing"] += trailing
    return doc


class BadJSON(Exception):
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


def parse_leniently(data: bytes, repairs: Repairs) -> tuple[Any, int]:
    """Slow path for text orjson rejects: repair the defects real Kineto files have (counted in `repairs`), else
    raise BadJSON. Returns the value and the number of non-blank characters after it."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadJSON(exc.start, "utf8") from None
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
        raise BadJSON(at, exc.msg, hint) from None
    except RecursionError:
        raise BadJSON(None, "nested too deeply") from None
    trailing = text[end:].strip()
    return doc, len(trailing) if trailing.strip("\x00") else 0


def _lenient_int(repairs: Repairs, digits: str) -> int | None:
    """An integer of the JSON text; None (counted in `repairs`) past Python's limit on digits converted."""
    try:
        return int(digits)
    except ValueError:
        repairs["bigint"] += 1
        return None
