"""The model's small data files (split_signal.toml, engine_steps.toml): `version = 1` and one array of tables."""

from __future__ import annotations

import tomllib
from typing import Any

from traceinsight.errors import FormatError


def versioned_tables(text: str, where: str, table: str) -> list[Any]:
    """The `[[table]]` entries of a data file's text that holds `version = 1` and nothing else; a mistake is a
    one-line FormatError naming `where`."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FormatError(f"{where}: not TOML: {exc}") from None
    entries = doc.get(table, [])
    if doc.get("version") != 1 or set(doc) - {"version", table} or not isinstance(entries, list):
        raise FormatError(f"{where}: expected version = 1 and [[{table}]] tables only")
    return entries
