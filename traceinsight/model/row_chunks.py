"""Int64 columns cut into chunks of CHUNK rows, for views of one row each (`model.kernel_columns.Kernel`,
`model.steps.Step`'s times): a view holds its chunk and its row in it, one of the ints Python shares (0..256),
so a view costs no int object of its own; `gather` reads the views' rows back as int64 arrays."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

# An int64 row's None (a time or range the object has not): the least int64, which no time takes.
NULL = -(2**63)

# Rows of one chunk: a view's row number is then one of the ints Python shares, not an object of its own.
CHUNK = 256

T = TypeVar("T")


def chunked(columns: Sequence[np.ndarray], make: Callable[..., T]) -> list[T]:
    """`make(*arrays)` for each CHUNK rows of these equally long columns (int64 `array.array`s, in order)."""
    whole = []
    for c in columns:
        a = array("q")
        a.frombytes(np.ascontiguousarray(c, np.int64).tobytes())
        whole.append(a)
    n = len(whole[0]) if whole else 0
    return [make(*(a[lo:lo + CHUNK] for a in whole)) for lo in range(0, n, CHUNK)]


def gather(views: Sequence[Any], chunk: Callable[[Any], Any], row: Callable[[Any], int], names: Sequence[str]
           ) -> dict[str, np.ndarray]:
    """The columns `names` (int64 `array.array` attributes of each chunk) at each view's `chunk(view)`, `row(view)`,
    in the views' order (one pass a getter: no tuple per view)."""
    n = len(views)
    chunks = list(map(chunk, views))
    distinct = list(dict.fromkeys(chunks))  # chunks compare by identity
    sizes = np.fromiter((len(getattr(d, names[0])) for d in distinct), np.int64, len(distinct))
    at = dict(zip(distinct, (np.cumsum(sizes) - sizes).tolist(), strict=True))
    where = np.fromiter(map(at.__getitem__, chunks), np.int64, n)
    where += np.fromiter(map(row, views), np.int64, n)
    return {c: np.frombuffer(b"".join(getattr(d, c).tobytes() for d in distinct), np.int64)[where] for c in names}
