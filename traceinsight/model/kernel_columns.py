"""Kernels as columns: a query's kernel rows (the kernel columns of step_launches.sql and step_kernels.sql) kept in
int64 arrays, and `Kernel`, a read-only view of one row whose attributes read them.

A long trace's steps hold a Kernel for each attention, merge and prepare kernel (10^6 at 10M kernels): as a
20-field object with four Python ints of its own each (id, start, end, duration) that was ~300 bytes a kernel. A
view is two references: its rows (`KernelRows`, at most `row_chunks.CHUNK` rows each, so the row number is one of
Python's shared small ints) and its row; its class is its shape's (the label's fields and the shared columns: stream,
device, grid, block, registers, shared memory; one class per distinct combination, those fields class
attributes). The ints are made when read, as Python ints (never numpy scalars).
"""

from __future__ import annotations

import functools
import itertools
import operator
from array import array
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import pyarrow as pa

from traceinsight.ingest.arrow_numpy import ints, numbers, valid
from traceinsight.model.row_chunks import CHUNK, chunked, gather
from traceinsight.model.shared_objects import Coded

# A kernel label's fields in Kernel's order (name, kernel, family, backend, phase, phase_evidence, params).
LabelFields = tuple[str, str, str, str | None, str, str, dict[str, Any]]

# A view's shape: its label's fields, then stream_id, device_id, grid, block, registers_per_thread, smem_bytes.
Shape = tuple[Any, ...]

# A shape's fields (`Shape`), in its order.
SHAPE_FIELDS = ("name", "kernel", "family", "backend", "phase", "phase_evidence", "params", "stream_id", "device_id",
                "grid", "block", "registers_per_thread", "smem_bytes")

# Kernel's fields, in the order the dataclass had them (its repr and equality).
FIELDS = ("kernel_id", "name", "kernel", "family", "backend", "phase", "phase_evidence", "params", "stream_id",
          "device_id", "start_ns", "end_ns", "dur_ns", "grid", "block", "registers_per_thread", "smem_bytes")


class KernelRows:
    """Up to CHUNK kernels' own integers, int64 each: kernel_id, start_ns, end_ns, dur_ns."""

    __slots__ = ("dur_ns", "end_ns", "kernel_id", "start_ns")

    def __init__(self, kernel_id: array[int], start_ns: array[int], end_ns: array[int], dur_ns: array[int]) -> None:
        self.kernel_id = kernel_id
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.dur_ns = dur_ns


class Kernel:
    """One kernel execution with its label (times in ns): a read-only view of row `_r` of `_c`. Its other fields
    are its shape's (`_shape`): class attributes of the subclass made for that shape (`shape_class`), as fast to
    read as a slot, or properties of `_Shaped` past MAX_SHAPE_CLASSES."""

    __slots__ = ("_c", "_r")

    _shape: Shape
    name: str
    kernel: str
    family: str
    backend: str | None
    phase: str
    phase_evidence: str
    params: dict[str, Any]
    stream_id: int | None
    device_id: int | None
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers_per_thread: int | None
    smem_bytes: int | None

    def __init__(self, rows: KernelRows, row: int) -> None:
        self._c = rows
        self._r = row

    @property
    def kernel_id(self) -> int:
        return self._c.kernel_id[self._r]

    @property
    def start_ns(self) -> int:
        return self._c.start_ns[self._r]

    @property
    def end_ns(self) -> int:
        return self._c.end_ns[self._r]

    @property
    def dur_ns(self) -> int:
        return self._c.dur_ns[self._r]

    def values(self) -> tuple[Any, ...]:
        """The fields' values, in FIELDS order."""
        return tuple(getattr(self, f) for f in FIELDS)

    def __eq__(self, other: object) -> bool:  # as the dataclass it replaces: field by field
        if not isinstance(other, Kernel):
            return NotImplemented
        return self.values() == other.values()

    __hash__ = None  # type: ignore[assignment]  # unhashable, as the dataclass it replaces

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (and copied) by its fields, as a row of its own: its class is made at run time (`shape_class`),
        which pickle cannot name."""
        return (kernel, self.values())

    def __repr__(self) -> str:
        return "Kernel(" + ", ".join(f"{f}={v!r}" for f, v in zip(FIELDS, self.values(), strict=True)) + ")"


class _Shaped(Kernel):
    """A Kernel whose shape is its own slot (past MAX_SHAPE_CLASSES shapes): its fields are properties."""

    __slots__ = ("_shape",)

    def __init__(self, rows: KernelRows, row: int, shape: Shape = ()) -> None:
        super().__init__(rows, row)
        self._shape = shape


def _shape_field(i: int) -> property:
    return property(lambda self: self._shape[i])


for _i, _f in enumerate(SHAPE_FIELDS):
    setattr(_Shaped, _f, _shape_field(_i))

# Shape classes one KernelViews makes at most (~1.6 KB and 20 us each); the shapes past them are `_Shaped`.
MAX_SHAPE_CLASSES = 4096


def shape_class(shape: Shape) -> type[Kernel]:
    """The Kernel subclass whose instances have this shape: its fields as class attributes."""
    return type("Kernel", (Kernel,), {"__slots__": (), "__module__": __name__, "_shape": shape,
                                      **dict(zip(SHAPE_FIELDS, shape, strict=True))})


def kernel(kernel_id: int, name: str, kernel: str, family: str, backend: str | None, phase: str,
           phase_evidence: str, params: dict[str, Any], stream_id: int | None, device_id: int | None, start_ns: int,
           end_ns: int, dur_ns: int, grid: tuple[int, int, int], block: tuple[int, int, int],
           registers_per_thread: int | None, smem_bytes: int | None) -> Kernel:
    """One Kernel of these fields (a row of its own), for a caller that has no query's rows: a `_Shaped` view, no
    class made per call (a pickled Kernel comes back through here, 10^6 of them for a long trace's steps)."""
    rows = KernelRows(*(array("q", [v]) for v in (kernel_id, start_ns, end_ns, dur_ns)))
    return _Shaped(rows, 0, (name, kernel, family, backend, phase, phase_evidence, params, stream_id, device_id, grid,
                             block, registers_per_thread, smem_bytes))


class KernelViews:
    """Builds the views of one or more query results' kernel rows, sharing each distinct shape across them."""

    def __init__(self, labels: dict[int, LabelFields], max_classes: int = MAX_SHAPE_CLASSES) -> None:
        self.labels = labels
        self.max_classes = max_classes
        self.makers: dict[tuple[Any, ...], Callable[[KernelRows, int], Kernel]] = {}  # by label id and shared ints
        self.classes = 0

    def of(self, table: pa.Table) -> list[Kernel]:
        """The kernels of a query's rows (kernel_id, label_id, stream_id, device_id, start_ns, end_ns, dur_ns,
        grid_x/y/z, block_x/y/z, registers_per_thread, smem_bytes), in row order."""
        n = table.num_rows
        if not n:
            return []
        col = {name: table.column(name).combine_chunks() for name in table.column_names}
        parts = [_codes(ints(col["label_id"], -1), None)]
        parts += [_codes(ints(col[c], 0), None if not col[c].null_count else valid(col[c]))
                  for c in ("stream_id", "device_id")]
        parts += [_triple_codes(col, "grid"), _triple_codes(col, "block")]
        parts += [_codes(ints(col[c], 0), None if not col[c].null_count else valid(col[c]))
                  for c in ("registers_per_thread", "smem_bytes")]
        if np.prod([float(len(values)) for _, values in parts]) < 2.0**62:  # the codes as one mixed-radix int64
            key = np.zeros(n, np.int64)
            for codes, values in parts:
                key = key * len(values) + codes
            _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        else:  # too many combinations for one int64: by rows of codes
            _, first, inverse = np.unique(np.stack([c for c, _ in parts], 1), axis=0, return_index=True,
                                          return_inverse=True)
        makers = np.empty(len(first), dtype=object)
        for i, r in enumerate(first.tolist()):
            label_id, *rest = (values[codes[r]] for codes, values in parts)
            whole = (label_id, *rest)
            got = self.makers.get(whole)
            if got is None:
                shape = (*self.labels[label_id], *rest)
                if self.classes < self.max_classes:
                    got = shape_class(shape)
                    self.classes += 1
                else:
                    got = functools.partial(_Shaped, shape=shape)
                self.makers[whole] = got
            makers[i] = got
        own = chunked([numbers(col[c]) for c in ("kernel_id", "start_ns", "end_ns", "dur_ns")], KernelRows)
        rows = itertools.chain.from_iterable(itertools.repeat(c, CHUNK) for c in own)
        return list(map(operator.call, makers[inverse.reshape(-1)].tolist(), rows, itertools.cycle(range(CHUNK))))


def _codes(values: np.ndarray, ok: np.ndarray | None) -> tuple[np.ndarray, list[Any]]:
    """Each row's position among the distinct values (NULL, where `ok` is False, as None: the last), and them."""
    distinct, inverse = np.unique(values, return_inverse=True)
    inverse = inverse.reshape(-1).astype(np.int64, copy=False)
    out: list[Any] = distinct.tolist()
    if ok is not None:
        inverse = np.where(ok, inverse, len(out))
        out.append(None)
    return inverse, out


def _triple_codes(col: dict[str, pa.Array], prefix: str) -> tuple[np.ndarray, list[Any]]:
    """Each row's position among the distinct (x, y, z) of the columns PREFIX_x/_y/_z (NULL as 0), and them: the
    three packed into one integer when they fit."""
    axes = [ints(col[f"{prefix}_{a}"], 0).astype(np.int64) for a in "xyz"]
    if all(a.min() >= 0 and a.max() < 1 << 21 for a in axes):
        packed = (axes[0] << 42) | (axes[1] << 21) | axes[2]
        distinct, inverse = np.unique(packed, return_inverse=True)
        values = [(v >> 42, (v >> 21) & 0x1FFFFF, v & 0x1FFFFF) for v in distinct.tolist()]
    else:
        rows, inverse = np.unique(np.stack(axes, 1), axis=0, return_inverse=True)
        values = [(x, y, z) for x, y, z in rows.tolist()]
    return inverse.reshape(-1).astype(np.int64, copy=False), values


_CHUNK = attrgetter("_c")
_ROW = attrgetter("_r")
_SHAPE = attrgetter("_shape")


def kernel_ids(kernels: Sequence[Kernel]) -> np.ndarray:
    """These kernels' kernel_id as int64, read from their rows rather than through each view's property."""
    return kernel_ints(kernels, ("kernel_id",))["kernel_id"]


def kernel_ints(kernels: Sequence[Kernel], names: Sequence[str]) -> dict[str, np.ndarray]:
    """These kernels' own integers `names` (of kernel_id, start_ns, end_ns, dur_ns) as int64 arrays, read from their
    rows rather than through each view's properties."""
    return gather(kernels, _CHUNK, _ROW, names)


def kernel_columns(kernels: Sequence[Kernel], own_fields: Sequence[str] = ("kernel_id", "start_ns", "end_ns", "dur_ns")
                   ) -> tuple[dict[str, np.ndarray], list[Coded]]:
    """These kernels' fields as columns, read from their rows and shapes rather than through each view's
    properties: their own integers `own_fields` (of kernel_id, start_ns, end_ns, dur_ns) as int64 arrays, and the
    shape's thirteen fields (`Shape`'s order) as `Coded` columns over the few distinct shapes (one array of codes
    shared by the thirteen, no reference per kernel)."""
    own = gather(kernels, _CHUNK, _ROW, own_fields)
    shapes = Coded.of(list(map(_SHAPE, kernels)))
    return own, [Coded([s[f] for s in shapes.values], shapes.codes) for f in range(len(SHAPE_FIELDS))]
