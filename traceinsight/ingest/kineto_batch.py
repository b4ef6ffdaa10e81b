"""One batch of Kineto traceEvents parsed: its kept elements (`kineto_prefilter`) with orjson, else the whole batch
through the lenient parser (`json_repair`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from traceinsight.errors import FormatError
from traceinsight.ingest.byte_stream import Repairs
from traceinsight.ingest.json_repair import BadJSON, parse_leniently
from traceinsight.ingest.json_stream import Batch
from traceinsight.ingest.kineto_prefilter import Kept, kept_elements, learn


def _element_count(batch: Batch, events: list[Any]) -> int:
    """Elements of the array in `batch` (`events` holds only those parsed when the batch has a separator)."""
    return batch.data.count(batch.sep) + 1 if batch.sep is not None else len(events)


def batch_events(batch: Batch, path: Path, repairs: Repairs, kept: Kept = None) -> tuple[list[Any], int]:
    """The events of one batch that may be kept, parsed (see `read`), and the number of elements in the batch.
    `kept`: the batch's kept elements when they were found already (`kept_elements`), else found from the batch
    alone."""
    data = batch.data
    if kept is None:
        kept = kept_elements(batch, learn({}, batch))
    if kept is not None:
        pieces, count = kept
        try:
            events = orjson.loads(joined(pieces))
        except orjson.JSONDecodeError:
            events = None
        if events is not None and len(events) == len(pieces):
            return events, count
    text = b"[" + data + b"]"
    try:
        events = orjson.loads(text)
        return events, _element_count(batch, events)
    except orjson.JSONDecodeError:
        pass
    try:
        events, trailing = parse_leniently(text, repairs)
    except BadJSON as bad:
        raise FormatError(bad.message(path, batch.offset - 1)) from None
    if trailing or type(events) is not list:
        raise FormatError(f"{path}: not valid JSON near byte {batch.offset}: traceEvents is not a list of values")
    return events, _element_count(batch, events)


def joined(pieces: list[bytes]) -> bytes:
    """Kept elements (each an object's text without its braces) as the text of a JSON array of them."""
    return b"[{" + b"},{".join(pieces) + b"}]"
