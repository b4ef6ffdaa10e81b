"""The terminal rich writes to: a console that colours only a terminal (never under NO_COLOR), laid out in the
columns asked for (--width, $COLUMNS, else the terminal's or PIPE_WIDTH for a pipe), whose lines lose rich's
trailing padding (`StripTrailing`); and `fit`, which drops a table's optional columns while it is wider than the
console, measuring each column once."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import IO, Any, cast

from rich.console import Console
from rich.table import Table

# Columns a table gives up, first to last, when the terminal is too narrow for all of them: squeezed instead, rich
# folds them into blank continuation lines under every row.
OPTIONAL_COLUMNS = ("grids", "p99", "p90", "stddev", "min", "median", "predicted", "other GPU", "phase", "launches",
                    "max", "backend", "host wait")


def fit(table: Table, console: Console, optional: Sequence[str] = OPTIONAL_COLUMNS) -> Table:
    """`table` without its optional columns, in OPTIONAL_COLUMNS order, as long as it is wider than the
    console. Each column's cells are measured once (rich would measure the whole table again after each column
    dropped: most of the time of a text report)."""
    content = content_widths(table, console)
    for name in optional:
        if natural_width(table, content) <= console.width:
            break
        table.columns[:] = [c for c in table.columns if c.header != name]
        for i, column in enumerate(table.columns):
            column._index = i  # rich pads the first and last column by their index
    return table


# The width tables are measured at: wide enough that nothing wraps.
_UNBOUNDED = 1 << 16


def content_widths(table: Table, console: Console) -> dict[int, int]:
    """Per column (by id): the widest of its header and cells, unwrapped (what rich measures them at, before
    padding)."""
    from rich.measure import Measurement

    options = console.options.update_width(_UNBOUNDED)
    out = {}
    for column in table.columns:
        cells = [*([column.header] if table.show_header else []), *column.cells,
                 *([column.footer] if table.show_footer else [])]
        out[id(column)] = column.width if column.width is not None else max(
            (Measurement.get(console, options, cell).maximum for cell in cells), default=_UNBOUNDED)
    return out


def natural_width(table: Table, content: dict[int, int]) -> int:
    """The width rich gives `table` unconstrained (`Measurement.get(...).maximum` of it), from its columns'
    `content` widths (by id): each column's content plus its padding (which depends on whether it is first or
    last), clamped to its min/max width, plus the table's edges and separators."""
    total = table._extra_width
    for i, column in enumerate(table.columns):
        pad = table._get_padding_width(i)
        width = content[id(column)] + pad
        if column.width is not None:
            total += width
            continue
        if column.min_width is not None:
            width = max(width, column.min_width + pad)
        if column.max_width is not None:
            width = min(width, column.max_width + pad)
        total += width
    return total


# Columns of text written to a pipe or file when neither --width nor $COLUMNS says (a width that pastes well).
PIPE_WIDTH = 120


def output_width(width: int | None = None, tty: bool = False) -> int | None:
    """Columns to lay text out in: `width` (--width) when given, else $COLUMNS when it is a positive number, else
    the terminal's (None: rich measures it) or PIPE_WIDTH when not writing to a terminal."""
    if width:
        return max(20, int(width))
    cols = os.environ.get("COLUMNS", "")
    if cols.strip().isdigit() and int(cols) > 0:
        return max(20, int(cols))
    return None if tty else PIPE_WIDTH


_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$")


class StripTrailing:
    """A text stream that passes lines on without trailing spaces (rich pads every line of a table to the
    console's width; pasted into an issue or diffed, those spaces are noise). Colour codes after the spaces
    are kept. A partial line is held until its newline or `flush`."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._held = ""

    def write(self, text: str) -> int:
        lines = (self._held + text).split("\n")
        self._held = lines.pop()
        if lines:
            self._stream.write("".join(_TRAILING.sub(r"\1", line) + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._held:
            self._stream.write(self._held)
            self._held = ""
        self._stream.flush()

    def isatty(self) -> bool:
        return bool(getattr(self._stream, "isatty", lambda: False)())

    def fileno(self) -> int:
        return int(self._stream.fileno())

    @property
    def encoding(self) -> str:
        return str(getattr(self._stream, "encoding", None) or "utf-8")


def make_console(file: Any = None, no_color: bool = False, stderr: bool = False,
                 force_terminal: bool | None = None, width: int | None = None) -> Console:
    """A console that colours only a terminal, never when NO_COLOR is set (non-empty) or `no_color` is asked;
    laid out in `output_width(width)` columns."""
    off = no_color or bool(os.environ.get("NO_COLOR"))
    stream = sys.stderr if stderr else sys.stdout
    tty = force_terminal if force_terminal is not None else (file is None and stream.isatty())
    out = cast(IO[str], StripTrailing(file if file is not None else stream))
    return Console(file=out, stderr=stderr, no_color=off, color_system=None if off else "auto", highlight=False,
                   soft_wrap=False, force_terminal=force_terminal, width=output_width(width, bool(tty)),
                   force_jupyter=False)  # in a notebook too: text into `file`, not a display of rich's own
