"""What a reader hands to the store: column lists per normalized table, plus facts about the file."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

# Column name -> values: a list, or an Arrow array (what the nsys reader hands over: no Python object per value).
Columns = dict[str, list[Any] | pa.Array]


@dataclass
class Ingest:
    """The output of one reader on one file.

    `tables` maps a table of `schema.sql` to its columns (name -> list or Arrow array, all of equal length).
    Readers omit `trace_id`, `kernel_id`, `range_id` and `dur_ns`: the store assigns ids in start order and derives
    durations.
    """

    format: str
    format_version: str | None = None
    tool_version: str | None = None
    tables: dict[str, Columns] = field(default_factory=dict)
    # Tables too long to hold at once (the nsys reader's activity tables of a long export): their slices, read
    # while the store inserts them, after `tables` and in this order; `warnings` is complete once they are.
    slices: dict[str, Iterator[Columns]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # The run this file is one rank of (`traces` columns of the same names), when the file says.
    rank: int | None = None
    world_size: int | None = None
    dist_backend: str | None = None
    process_groups: str | None = None  # JSON

    def columns(self, table: str, names: list[str]) -> Columns:
        """Return (creating on first use) the column dict of `table` with the given column names."""
        cols = self.tables.get(table)
        if cols is None:
            cols = {n: [] for n in names}
            self.tables[table] = cols
        return cols

    def lists(self, table: str) -> dict[str, list[Any]]:
        """The columns of `table` as Python lists (Arrow arrays converted; an absent table: no columns). A table
        handed over a slice at a time (`slices`) is not held here: only the store reads it (`TraceDB.add`)."""
        if table in self.slices:
            raise ValueError(f"{table} is read a slice at a time, while TraceDB.add inserts it")
        return {n: v if isinstance(v, list) else v.to_pylist() for n, v in self.tables.get(table, {}).items()}
