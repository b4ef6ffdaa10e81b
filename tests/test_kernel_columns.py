"""`model.kernel_columns`: the kernels of a query's rows as views of int64 columns. Each view reads back its row's
values as Python ints (never numpy scalars), NULL as None, its label's fields by label id, across chunk and batch
boundaries, past the shape-class cap too; `kernel_columns` gathers the same values for any order of views; and a
view compares, prints and refuses hashing as the dataclass it replaced."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from traceinsight.model.kernel_columns import FIELDS, SHAPE_FIELDS, Kernel, KernelViews, kernel, kernel_columns
from traceinsight.model.row_chunks import CHUNK

LABELS: dict[int, Any] = {
    0: ("attn_kernel<1>", "attn", "attention", "fa2", "decode", "by name", {"cta_tile_q": 16}),
    3: ("merge_states", "merge", "merge", None, "unknown", "", {}),
}
BIG = 2**40 + 7  # ids and times beyond any shared small int


def _rows(n: int, seed: int) -> dict[str, list[Any]]:
    rng = random.Random(seed)
    return {
        "kernel_id": [BIG + seed * 10_000 + i for i in range(n)],
        "label_id": [rng.choice([0, 3]) for _ in range(n)],
        "stream_id": [rng.choice([7, None]) for _ in range(n)],
        "device_id": [0] * n,
        "start_ns": [BIG + 100 * i for i in range(n)],
        "end_ns": [BIG + 100 * i + 40 + i % 9 for i in range(n)],
        "dur_ns": [40 + i % 9 for i in range(n)],
        "grid_x": [rng.choice([1, 132, 2**22]) for _ in range(n)],  # 2**22: too wide to pack three in an int64
        "grid_y": [8] * n, "grid_z": [1] * n,
        "block_x": [128] * n, "block_y": [rng.choice([1, None]) for _ in range(n)], "block_z": [1] * n,
        "registers_per_thread": [rng.choice([None, 96]) for _ in range(n)],
        "smem_bytes": [rng.choice([0, 49152]) for _ in range(n)],
    }


def _expected(rows: dict[str, list[Any]]) -> list[tuple[Any, ...]]:
    out = []
    for i in range(len(rows["kernel_id"])):
        name, short, family, backend, phase, evidence, params = LABELS[rows["label_id"][i]]
        grid = tuple(rows[f"grid_{a}"][i] or 0 for a in "xyz")
        block = tuple(rows[f"block_{a}"][i] or 0 for a in "xyz")
        out.append((rows["kernel_id"][i], name, short, family, backend, phase, evidence, params, rows["stream_id"][i],
                    rows["device_id"][i], rows["start_ns"][i], rows["end_ns"][i], rows["dur_ns"][i], grid, block,
                    rows["registers_per_thread"][i], rows["smem_bytes"][i]))
    return out


def _table(rows: dict[str, list[Any]]) -> pa.Table:
    return pa.table({c: pa.array(v, pa.int64()) for c, v in rows.items()})


@pytest.mark.parametrize("max_classes", [4096, 1, 0])
def test_views_read_back_every_row_as_python_values(max_classes: int) -> None:
    views = KernelViews(LABELS, max_classes)
    batches = [_rows(2 * CHUNK + 5, 1), _rows(3, 2)]  # past a chunk boundary, and a second batch
    got = [k for b in batches for k in views.of(_table(b))]
    want = [e for b in batches for e in _expected(b)]
    assert [k.values() for k in got] == want
    assert all(type(v) is int for k in got for v in (k.kernel_id, k.start_ns, k.end_ns, k.dur_ns))
    assert all(type(v) is int for k in got for v in (*k.grid, *k.block))
    assert {id(k.params) for k in got if k.family == "attention"} == {id(LABELS[0][6])}  # the label's, shared
    if max_classes == 4096:  # a class per distinct shape, shared across the batches
        assert len({type(k) for k in got}) == len({(v := k.values())[1:7] + v[8:10] + v[13:] for k in got})


def test_no_rows_no_kernels() -> None:
    assert KernelViews(LABELS).of(_table({c: [] for c in _rows(0, 0)})) == []
    own, shape = kernel_columns([])
    assert [len(v) for v in own.values()] == [0] * 4 and [list(c) for c in shape] == [[]] * len(SHAPE_FIELDS)


def test_kernel_columns_gather_what_each_view_reads_in_any_order() -> None:
    views = KernelViews(LABELS, max_classes=2)  # class-shaped and slot-shaped views mixed
    kernels = views.of(_table(_rows(3 * CHUNK, 3))) + views.of(_table(_rows(50, 4)))
    random.Random(5).shuffle(kernels)
    kernels = kernels[: len(kernels) - 17]
    own, shape = kernel_columns(kernels)
    for f in ("kernel_id", "start_ns", "end_ns", "dur_ns"):
        assert own[f].dtype == np.int64 and own[f].tolist() == [getattr(k, f) for k in kernels]
    for f, column in zip(SHAPE_FIELDS, shape, strict=True):
        assert list(column) == [getattr(k, f) for k in kernels]


def test_a_view_compares_prints_and_hashes_as_the_dataclass_did() -> None:
    fields = (5, "n", "k", "attention", None, "decode", "", {}, 1, 0, 10, 20, 10, (1, 2, 3), (4, 1, 1), None, 0)
    a, b = kernel(*fields), kernel(*fields)
    table = _rows(1, 6)
    c = KernelViews(LABELS).of(_table(table))[0]
    assert a == b and a != c and a.values() == fields and isinstance(c, Kernel)
    assert c == KernelViews(LABELS, max_classes=0).of(_table(table))[0]  # the same row, either kind of view
    assert repr(a) == "Kernel(" + ", ".join(f"{f}={v!r}" for f, v in zip(FIELDS, fields, strict=True)) + ")"
    with pytest.raises(TypeError):
        hash(a)
    with pytest.raises(AttributeError):
        a.start_ns = 3  # type: ignore[misc]
