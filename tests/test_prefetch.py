"""Slices read ahead on a worker thread (`ingest.prefetch.Prefetched`): every slice of every table comes to the
caller in order; an error of the worker comes where its slice would have; a caller that stops early (an insert
that failed, or one that never asks) stops the worker, whose unfinished tables are closed on its thread."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator

import pytest

from traceinsight.ingest.base import Columns
from traceinsight.ingest.prefetch import Prefetched


class _Table:
    """Slices {"i": [k]} for k in range(n), noting the threads it ran on and whether it was closed before its end."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at = n, fail_at
        self.threads: set[str] = set()
        self.closed_early = False
        self.read = 0

    def __iter__(self) -> Iterator[Columns]:
        return self._slices()

    def _slices(self) -> Iterator[Columns]:
        self.threads.add(threading.current_thread().name)
        try:
            for k in range(self.n):
                if k == self.fail_at:
                    raise ValueError(f"damaged at slice {k}")
                self.read += 1
                yield {"i": [k]}
        except GeneratorExit:
            self.closed_early = True
            raise


def _wait_for(cond: object, seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if callable(cond) and cond():
            return True
        time.sleep(0.02)
    return False


def test_every_slice_in_order_read_on_the_worker() -> None:
    a, b = _Table(5), _Table(3)
    ahead = Prefetched({"a": iter(a), "b": iter(b)})
    got = {name: [cols["i"][0] for cols in ahead.slices(name)] for name in ("a", "b")}
    assert got == {"a": [0, 1, 2, 3, 4], "b": [0, 1, 2]}
    assert a.threads == b.threads == {"nsys-slices"}
    assert not a.closed_early and not b.closed_early


def test_an_error_comes_where_its_slice_would_have() -> None:
    ahead = Prefetched({"a": iter(_Table(4, fail_at=2)), "b": iter(_Table(3))})
    seen = []
    with pytest.raises(ValueError, match="damaged at slice 2"):
        for cols in ahead.slices("a"):
            seen.append(cols["i"][0])
    assert seen == [0, 1]


def test_reading_ahead_is_bounded_and_stops_with_the_caller() -> None:
    a, b = _Table(100), _Table(100)
    ahead = Prefetched({"a": iter(a), "b": iter(b)})
    slices = ahead.slices("a")
    assert next(slices)["i"] == [0]
    time.sleep(0.3)
    assert a.read <= 4  # one handed over, one waiting, one being read: never the whole table
    slices.close()  # the caller stops (an insert failed)
    assert _wait_for(lambda: a.closed_early)
    assert _wait_for(lambda: not ahead.worker.is_alive())
    assert b.read == 0


def test_a_caller_that_never_asks_stops_the_worker() -> None:
    a = _Table(100)
    worker = Prefetched({"a": iter(a)}).worker  # dropped at once
    gc.collect()
    assert _wait_for(lambda: a.closed_early)
    assert _wait_for(lambda: not worker.is_alive())
