"""Limits on what a reader accepts, so that a hostile or broken file fails with one line instead of exhausting
memory or time: decompressed size and compression ratio of gzip input (decompression bombs), the length of a
name kept (kernel, NVTX, API), and JSON nesting depth.

Each limit has a default and an environment override, read when the limit is used (not at import), so a user
can raise one for a single run: `TRACEINSIGHT_MAX_DECOMPRESSED_BYTES=68719476736 traceinsight analyze big.json.gz`.

| limit | default | environment variable |
|---|---|---|
| decompressed bytes of one gzip file | 32 GiB | TRACEINSIGHT_MAX_DECOMPRESSED_BYTES |
| compression ratio (once past 256 MiB decompressed) | 200 | TRACEINSIGHT_MAX_COMPRESSION_RATIO |
| characters kept of one name | 65,536 | TRACEINSIGHT_MAX_NAME_CHARS |

Real Kineto traces expand 13-30x (metadata files up to 54x); a gzip bomb expands about 1000x, so the ratio check
stops one after 256 MiB instead of after the absolute limit.
"""

from __future__ import annotations

import os
from pathlib import Path

from traceinsight.errors import LimitError

ENV_MAX_DECOMPRESSED_BYTES = "TRACEINSIGHT_MAX_DECOMPRESSED_BYTES"
ENV_MAX_COMPRESSION_RATIO = "TRACEINSIGHT_MAX_COMPRESSION_RATIO"
ENV_MAX_NAME_CHARS = "TRACEINSIGHT_MAX_NAME_CHARS"

DEFAULT_MAX_DECOMPRESSED_BYTES = 32 << 30
DEFAULT_MAX_COMPRESSION_RATIO = 200.0
# The ratio is checked only once this much was decompressed (small files compress arbitrarily well).
RATIO_CHECK_AFTER_BYTES = 256 << 20
DEFAULT_MAX_NAME_CHARS = 1 << 16
# orjson's fixed limit; Python's json module stops near its recursion limit (1000) as well.
MAX_JSON_DEPTH = 1024


def _env_number(name: str, default: float, minimum: float) -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw.strip().replace("_", ""))
    except ValueError:
        raise LimitError(f"${name}={raw!r} is not a number") from None
    if not value >= minimum:  # also rejects NaN
        raise LimitError(f"${name}={raw!r} must be at least {minimum:g}")
    return value


def max_decompressed_bytes() -> int:
    """Most bytes one gzip file may expand to ($TRACEINSIGHT_MAX_DECOMPRESSED_BYTES, default 32 GiB)."""
    return int(_env_number(ENV_MAX_DECOMPRESSED_BYTES, DEFAULT_MAX_DECOMPRESSED_BYTES, 1))


def max_compression_ratio() -> float:
    """Largest decompressed/compressed size ratio accepted past RATIO_CHECK_AFTER_BYTES
    ($TRACEINSIGHT_MAX_COMPRESSION_RATIO, default 200)."""
    return _env_number(ENV_MAX_COMPRESSION_RATIO, DEFAULT_MAX_COMPRESSION_RATIO, 1)


def max_name_chars() -> int:
    """Characters kept of one name ($TRACEINSIGHT_MAX_NAME_CHARS, default 65,536)."""
    return int(_env_number(ENV_MAX_NAME_CHARS, DEFAULT_MAX_NAME_CHARS, 64))


class DecompressionBudget:
    """Counts the bytes a gzip file expands to and raises a one-line LimitError (a FormatError) once they pass
    the absolute limit, or the ratio limit against the compressed bytes consumed so far.

    Use: `budget = DecompressionBudget(path)`, then `budget.add(len(out), consumed=compressed_bytes_so_far)`
    after each decompression step. Limits are read from the environment when the budget is created."""

    def __init__(self, path: Path, max_bytes: int | None = None, max_ratio: float | None = None) -> None:
        self.path = path
        self.max_bytes = max_decompressed_bytes() if max_bytes is None else max_bytes
        self.max_ratio = max_compression_ratio() if max_ratio is None else max_ratio
        self.total = 0

    def add(self, n: int, consumed: int | None = None) -> None:
        """Count `n` more decompressed bytes; `consumed`: compressed bytes read so far (enables the ratio check)."""
        self.total += n
        if self.total > self.max_bytes:
            raise LimitError(
                f"{self.path}: the gzip stream expands past {_size(self.max_bytes)} (a decompression bomb, or a "
                f"trace larger than the limit: raise it with {ENV_MAX_DECOMPRESSED_BYTES}=<bytes>)"
            )
        if consumed and self.total > RATIO_CHECK_AFTER_BYTES and self.total > self.max_ratio * consumed:
            raise LimitError(
                f"{self.path}: the gzip stream expands {self.total / consumed:.0f}x ({_size(consumed)} to more than "
                f"{_size(self.total)}): a decompression bomb, not a trace (if it is one, raise "
                f"{ENV_MAX_COMPRESSION_RATIO})"
            )


def clip_name(name: str, limit: int | None = None) -> str:
    """`name` cut to `limit` characters (default `max_name_chars()`) with a marker saying how much was dropped;
    unchanged when it fits."""
    limit = max_name_chars() if limit is None else limit
    if len(name) <= limit:
        return name
    return f"{name[:limit]}...[{len(name) - limit} more characters]"


def clip_names(names: list[str | None], limit: int | None = None) -> tuple[list[str | None], int]:
    """`clip_name` over a column of names; returns the column and how many were cut (the same list when none)."""
    limit = max_name_chars() if limit is None else limit
    if not any(map(limit.__lt__, map(len, filter(None, names)))):  # C-speed pass for the usual case: none long
        return names, 0
    long = [i for i, n in enumerate(names) if n is not None and len(n) > limit]
    out = list(names)
    for i in long:
        out[i] = clip_name(out[i] or "", limit)
    return out, len(long)


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} bytes"
