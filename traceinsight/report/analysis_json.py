"""An analysis JSON document (`analyze --format json`, schema traceinsight.analysis/1 or its multi-trace form) as a
`diff` input: recognized by its schema line, read (gzip-compressed or not) as one document."""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any

import orjson

from traceinsight.errors import FormatError, InputError

ANALYSIS_SCHEMA = re.compile(rb'"schema"\s*:\s*"traceinsight\.analys(?:is|es)/1"')


def is_analysis_json(path: Path) -> bool:
    """Whether `path` holds a traceinsight analysis document (plain or gzipped JSON), not a trace."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
            fh.seek(0)
            raw = gzip.open(fh).read(512) if head == b"\x1f\x8b" else fh.read(512)  # noqa: SIM115
    except (OSError, EOFError):
        return False
    return bool(ANALYSIS_SCHEMA.search(raw))


def load_analysis_json(path: Path) -> dict[str, Any]:
    """The (single) analysis document stored at `path`."""
    try:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        doc: dict[str, Any] = orjson.loads(data)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (orjson.JSONDecodeError, EOFError, gzip.BadGzipFile) as exc:
        raise FormatError(f"{path}: damaged analysis JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise FormatError(f"{path}: a JSON {type(doc).__name__}, not a traceinsight document")
    if doc.get("schema") == "traceinsight.analyses/1":
        traces = doc.get("traces") or []
        if len(traces) != 1:
            raise FormatError(f"{path}: holds {len(traces)} analyses; diff compares one trace with one trace")
        doc = traces[0]
    return doc
