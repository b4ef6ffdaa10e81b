"""Rows of a damaged or truncated SQLite file, read page by page without SQLite (which refuses the whole file as
soon as one page of its schema is missing), copied into a fresh SQLite database the readers can query.

The walker follows the file format (https://www.sqlite.org/fileformat2.html): the 100-byte header, table b-tree
pages (interior 0x05, leaf 0x0D), cells with overflow chains, and records of serial types. A page that is beyond
the end of the file, out of range, already visited (a cycle) or not a table b-tree page is skipped and counted;
every row on the pages that remain is kept. The schema table (rooted at page 1) is walked the same way, so the
tables whose schema rows survived are found even when others were lost.

Nothing is written to the damaged file: it is mapped read-only (pages are read on demand, not loaded whole) and
the rebuilt database goes to a path the caller chooses (a private temporary folder).
"""

from __future__ import annotations

import mmap
import sqlite3
import struct
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SQLITE_MAGIC = b"SQLite format 3\x00"
_INTERIOR_TABLE, _LEAF_TABLE = 0x05, 0x0D


@dataclass
class Salvage:
    """What a salvage found: file size against the header's claim, pages unreadable, rows kept per table."""

    file_bytes: int
    page_size: int
    header_pages: int  # pages the header says the database has (0 when it does not say)
    bad_pages: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    lost_tables: list[str] = field(default_factory=list)  # wanted tables whose schema row or root page is lost

    @property
    def pages_present(self) -> int:
        return self.file_bytes // self.page_size

    @property
    def truncated(self) -> bool:
        return self.header_pages > 0 and self.file_bytes < self.header_pages * self.page_size

    def describe(self) -> str:
        """Where the data ends, in words: 'truncated at byte 163840 of 368640 (page 40 of 90)' or 'damaged'."""
        if self.truncated:
            return (
                f"truncated at byte {self.file_bytes} of {self.header_pages * self.page_size} "
                f"(page {self.pages_present} of {self.header_pages})"
            )
        return f"damaged ({self.bad_pages} unreadable pages)"


class NotSQLite(Exception):
    """The bytes do not start with a SQLite header."""


def header_facts(head: bytes) -> tuple[int, int]:
    """(page size, page count claimed by the header, 0 when the count is not valid) from the first 100 bytes."""
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC):
        raise NotSQLite("no SQLite header")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise NotSQLite(f"page size {page_size} is not a power of two >= 512")
    pages = int.from_bytes(head[28:32], "big")
    valid = head[24:28] == head[92:96] and pages > 0  # the count is valid when the change counters agree
    return page_size, pages if valid else 0


def is_truncated(path: Path) -> bool:
    """Whether `path` is shorter than its SQLite header says (reads 100 bytes)."""
    with path.open("rb") as fh:
        head = fh.read(100)
    try:
        page_size, pages = header_facts(head)
    except NotSQLite:
        return False
    return pages > 0 and path.stat().st_size < pages * page_size


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    """SQLite varint at `buf[i]`: (value, index after it). Raises IndexError past the end."""
    v = 0
    for k in range(8):
        b = buf[i + k]
        v = (v << 7) | (b & 0x7F)
        if b < 0x80:
            return v, i + k + 1
    v = (v << 8) | buf[i + 8]
    if v >= 1 << 63:
        v -= 1 << 64
    return v, i + 9


_INT_SIZES = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}


def decode_record(payload: bytes, text_encoding: str = "utf-8") -> list[Any]:
    """The values of one record (a header of serial types, then the bodies). TEXT that is not valid in the
    database's encoding is decoded with replacement characters, as the readers read text."""
    n_header, i = _varint(payload, 0)
    types = []
    while i < n_header:
        t, i = _varint(payload, i)
        types.append(t)
    pos = n_header
    out: list[Any] = []
    for t in types:
        if t == 0:
            out.append(None)
        elif t in _INT_SIZES:
            size = _INT_SIZES[t]
            chunk = payload[pos : pos + size]
            if len(chunk) < size:
                raise ValueError("record body cut")
            out.append(int.from_bytes(chunk, "big", signed=True))
            pos += size
        elif t == 7:
            chunk = payload[pos : pos + 8]
            if len(chunk) < 8:
                raise ValueError("record body cut")
            out.append(struct.unpack(">d", chunk)[0])
            pos += 8
        elif t in (8, 9):
            out.append(t - 8)
        elif t >= 12:
            size = (t - 12) // 2
            chunk = payload[pos : pos + size]
            if len(chunk) < size:
                raise ValueError("record body cut")
            out.append(bytes(chunk) if t % 2 == 0 else chunk.decode(text_encoding, "replace"))
            pos += size
        else:
            raise ValueError(f"reserved serial type {t}")
    return out


class _File:
    """The bytes of a SQLite file and its page geometry."""

    def __init__(self, data: bytes | mmap.mmap) -> None:
        self.data = data
        self.page_size, self.header_pages = header_facts(data[:100])
        reserved = data[20]
        self.usable = self.page_size - reserved
        enc = int.from_bytes(data[56:60], "big")
        self.encoding = {2: "utf-16-le", 3: "utf-16-be"}.get(enc, "utf-8")
        self.n_pages = len(data) // self.page_size
        self.bad_pages = 0

    def page(self, no: int) -> bytes | None:
        if no < 1 or no > self.n_pages:
            return None
        return self.data[(no - 1) * self.page_size : no * self.page_size]

    def _payload(self, page: bytes, i: int, size: int) -> bytes:
        """The payload of `size` bytes starting at page[i], following its overflow chain (cut where it breaks)."""
        u = self.usable
        max_local = u - 35
        if size <= max_local:
            return page[i : i + size]
        min_local = ((u - 12) * 32 // 255) - 23
        local = min_local + (size - min_local) % (u - 4)
        if local > max_local:
            local = min_local
        parts = [page[i : i + local]]
        got = local
        nxt = int.from_bytes(page[i + local : i + local + 4], "big")
        seen: set[int] = set()
        while got < size and nxt and nxt not in seen:
            seen.add(nxt)
            ov = self.page(nxt)
            if ov is None:
                raise ValueError("overflow page lost")
            take = min(size - got, u - 4)
            parts.append(ov[4 : 4 + take])
            got += take
            nxt = int.from_bytes(ov[:4], "big")
        if got < size:
            raise ValueError("overflow chain cut")
        return b"".join(parts)

    def table_rows(self, root: int) -> Iterator[tuple[int, list[Any]]]:
        """(rowid, values) of every readable row of the table b-tree rooted at `root`, in key order."""
        stack = [root]
        seen: set[int] = set()
        while stack:
            no = stack.pop()
            if no in seen:
                self.bad_pages += 1
                continue
            seen.add(no)
            page = self.page(no)
            if page is None:
                self.bad_pages += 1
                continue
            base = 100 if no == 1 else 0
            try:
                kind = page[base]
                n_cells = int.from_bytes(page[base + 3 : base + 5], "big")
                if kind == _INTERIOR_TABLE:
                    right = int.from_bytes(page[base + 8 : base + 12], "big")
                    ptrs = page[base + 12 : base + 12 + 2 * n_cells]
                    children = [int.from_bytes(page[p : p + 4], "big") for p in _cell_offsets(ptrs)]
                    stack.append(right)
                    stack.extend(reversed(children))  # leftmost child popped first: rows come in key order
                    continue
                if kind != _LEAF_TABLE:
                    self.bad_pages += 1
                    continue
                ptrs = page[base + 8 : base + 8 + 2 * n_cells]
            except IndexError:
                self.bad_pages += 1
                continue
            for off in _cell_offsets(ptrs):
                try:
                    size, i = _varint(page, off)
                    rowid, i = _varint(page, i)
                    values = decode_record(self._payload(page, i, size), self.encoding)
                except (IndexError, ValueError, UnicodeError, struct.error):
                    self.bad_pages += 1
                    continue
                yield rowid, values


def _cell_offsets(ptrs: bytes) -> Iterator[int]:
    for k in range(0, len(ptrs) - 1, 2):
        yield int.from_bytes(ptrs[k : k + 2], "big")


def schema(data: bytes | mmap.mmap) -> list[tuple[str, str, int, str]]:
    """(type, name, rootpage, sql) of every readable schema row of the SQLite file `data`."""
    f = _File(data)
    out = []
    for _, values in f.table_rows(1):
        values = (values + [None] * 5)[:5]
        kind, name, _, root, sql = values
        if isinstance(kind, str) and isinstance(name, str):
            out.append((kind, name, root if isinstance(root, int) else 0, sql if isinstance(sql, str) else ""))
    return out


def table_names(path: Path) -> set[str]:
    """Names of the tables whose schema rows can be read from a damaged SQLite file (NotSQLite when it has no
    SQLite header)."""
    with _mapped(path) as data:
        return {name for kind, name, _, _ in schema(data) if kind == "table"}


@contextmanager
def _mapped(path: Path) -> Iterator[bytes | mmap.mmap]:
    """The file's bytes, memory-mapped read-only (an empty file gives b"")."""
    with path.open("rb") as fh:
        if path.stat().st_size == 0:
            yield b""
            return
        m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield m
        finally:
            m.close()


def _columns(create_sql: str) -> tuple[list[str], int | None]:
    """Column names of a CREATE TABLE statement, and the index of its rowid alias (INTEGER PRIMARY KEY), if any."""
    con = sqlite3.connect(":memory:")
    try:
        con.execute(create_sql)
        name = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchone()[0]
        info = con.execute(f'PRAGMA table_info("{name}")').fetchall()
    finally:
        con.close()
    names = [r[1] for r in info]
    pks = [r for r in info if r[5]]
    alias = None
    if len(pks) == 1 and str(pks[0][2]).upper() == "INTEGER":
        alias = names.index(pks[0][1])
    return names, alias


def rebuild(src: Path, dest: Path, tables: Collection[str]) -> Salvage:
    """Copy the readable rows of `tables` from the damaged SQLite file `src` into a new database at `dest` (same
    CREATE statements, so the readers query it as they would the original). NotSQLite without a SQLite header."""
    with _mapped(src) as data:
        return _rebuild(data, dest, tables)


def _rebuild(data: bytes | mmap.mmap, dest: Path, tables: Collection[str]) -> Salvage:
    f = _File(data)
    report = Salvage(file_bytes=len(data), page_size=f.page_size, header_pages=f.header_pages)
    entries = {name: (root, sql) for kind, name, root, sql in schema(data) if kind == "table"}
    report.bad_pages = f.bad_pages
    con = sqlite3.connect(dest)
    try:
        for table in tables:
            if table not in entries:
                report.lost_tables.append(table)
                continue
            root, sql = entries[table]
            try:
                names, alias = _columns(sql)
                con.execute(sql)
            except (sqlite3.Error, TypeError):
                report.lost_tables.append(table)
                continue
            marks = ", ".join("?" * len(names))
            cols = ", ".join(f'"{n}"' for n in names)
            insert = f'INSERT OR IGNORE INTO "{table}" ({cols}) VALUES ({marks})'
            width = len(names)
            batch: list[list[Any]] = []
            kept = 0
            for rowid, values in f.table_rows(root):
                row = (values + [None] * width)[:width]  # columns added later are absent from old records
                if alias is not None:
                    row[alias] = rowid
                batch.append(row)
                if len(batch) >= 10000:
                    kept += _insert(con, insert, batch)
                    batch = []
            kept += _insert(con, insert, batch)
            report.rows[table] = kept
        con.commit()
    finally:
        con.close()
    report.bad_pages = f.bad_pages
    return report


def _insert(con: sqlite3.Connection, sql: str, rows: list[list[Any]]) -> int:
    if not rows:
        return 0
    before = con.total_changes
    con.executemany(sql, rows)
    return con.total_changes - before
