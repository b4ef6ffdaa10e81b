"""Slices of several tables read ahead, in order, by one worker thread while the caller inserts the ones before.

The nsys reader hands its long tables over a slice at a time (`Ingest.slices`); reading a slice (SQLite through the
ADBC driver) and inserting the one before (DuckDB) both run without the GIL, so on a second core the two overlap.
`Prefetched` runs the tables' slice iterators one after the other on one worker thread (started at once: the reads
also overlap whatever the caller does before it asks for the first slice), each slice handed over through a queue of
AHEAD slices: at most AHEAD + 2 slices are held (one being read, AHEAD waiting, one being inserted). The caller must
ask for the tables in the order given (the store inserts `Ingest.slices` in its order); an error in the worker is
raised to the caller where the slice it stopped at would have come. The worker is a daemon thread that gives up
once the caller has stopped (`close`, or a table's iterator closed before its end).
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from traceinsight.ingest.base import Columns

# Slices waiting for the caller, per table (besides the one being read and the one being inserted).
AHEAD = 1
# How often (seconds) the worker, waiting for room in a queue checks whether the caller has stopped.
_POLL_S = 0.2

_END = object()


class Prefetched:
    """`tables` (name -> its slices, in the order the caller reads them) read ahead on one worker thread."""

    def __init__(self, tables: dict[str, Iterator[Columns]]) -> None:
        self._queues: dict[str, queue.Queue[Any]] = {n: queue.Queue(maxsize=AHEAD) for n in tables}
        self._last = next(reversed(tables), None)
        self._stop = threading.Event()
        # The worker holds the queues and the event, not this object: once the caller drops it (and the slices
        # it handed out), it is collected and the worker told to stop, even where no slice was ever asked for.
        weakref.finalize(self, self._stop.set)
        self.worker = threading.Thread(target=_read, args=(tables, self._queues, self._stop), name="nsys-slices",
                                       daemon=True)
        self.worker.start()

    def slices(self, name: str) -> Iterator[Columns]:
        """The slices of table `name`, as they are read; closed before its end (an error while inserting),
        the worker stops."""
        finished = False
        try:
            while True:
                item = self._queues[name].get()
                if item is _END:
                    finished = True
                    if name == self._last:  # the worker's last act: wait for it to end, so no thread outlives the read
                        self.worker.join()
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if not finished:
                self.close()

    def close(self) -> None:
        """Stop the worker (the slices not read yet are dropped) and wait for it to end (at most a read of one slice
        and a poll)."""
        self._stop.set()
        if self.worker is not threading.current_thread():
            self.worker.join()


def _put(queues: dict[str, queue.Queue[Any]], stop: threading.Event, name: str, item: Any) -> bool:
    """Hand `item` over; False once the caller has stopped."""
    while not stop.is_set():
        try:
            queues[name].put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _read(tables: dict[str, Iterator[Columns]], queues: dict[str, queue.Queue[Any]], stop: threading.Event) -> None:
    """The worker: each table's slices in turn, then its end mark; an error ends the worker (and the caller's
    reading, where it meets it)."""
    for name, slices in tables.items():
        try:
            for cols in slices:
                if not _put(queues, stop, name, cols):
                    return
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            _put(queues, stop, name, exc)
            return
        finally:
            if stop.is_set():
                for rest in tables.values():  # their connections, opened here: closed here
                    close = getattr(rest, "close", None)
                    if close is not None:
                        close()
        if not _put(queues, stop, name, _END):
            return
