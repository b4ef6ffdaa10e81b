"""The step breakdown's split over GPU work that streams in (`gpu_work.work_pieces`): per device, only the intervals
from the first one a window still waiting may need are held, not every interval of the trace (26M at 10M kernels,
0.9 GB as whole arrays, on top of the analysis's objects). A window is split as soon as the work after its end has
come (its split reads the first interval starting at or after its end, for the idle tail's launch call); what
`window_split.split_rows` gives for it is what it gives on the whole arrays, since a window reads only its own
intervals, that next one, and the running maximum of ends and the overlap counts, carried across pieces."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from traceinsight.model.gpu_work import Piece, Work
from traceinsight.model.window_split import Rows, split_rows


class _Held:
    """A device's intervals from global position `base` on, with the running maximum of their ends (`reach`) and
    the overlap counts of `window_split.overlap_pairs` (`pairs`), both as over the device's whole work."""

    start: np.ndarray
    end: np.ndarray
    launch: np.ndarray
    comp: np.ndarray
    reach: np.ndarray
    pairs: np.ndarray

    def __init__(self, names: list[str]) -> None:
        self.names = names
        empty = np.zeros(0, np.int64)
        self.start, self.end, self.launch, self.reach, self.pairs = empty, empty, empty, empty, empty
        self.comp = np.zeros(0, np.int32)

    def add(self, p: Piece) -> None:
        if not len(p.start):
            return
        reach = np.maximum.accumulate(p.end)
        over = np.empty(len(p.start), np.int64)
        over[1:] = p.start[1:] < p.end[:-1]
        if len(self.end):
            np.maximum(reach, self.reach[-1], out=reach)
            over[0] = p.start[0] < self.end[-1]
            base = self.pairs[-1]
        else:
            over[0] = 0
            base = 0
        pairs = np.cumsum(over) + base
        self.start, self.end, self.launch, self.comp, self.reach, self.pairs = (
            np.concatenate((a, b)) for a, b in ((self.start, p.start), (self.end, p.end), (self.launch, p.launch),
                                                (self.comp, p.comp), (self.reach, reach), (self.pairs, pairs)))

    def drop(self, n: int) -> None:
        """Forget the first n intervals (copies: the rest no longer keeps the old arrays alive)."""
        if n > 0:
            self.start, self.end, self.launch, self.comp, self.reach, self.pairs = (
                a[n:].copy() for a in (self.start, self.end, self.launch, self.comp, self.reach, self.pairs))

    def work(self) -> Work:
        return Work(self.start, self.end, self.launch, self.comp, self.reach, self.names)


def streamed_rows(pieces: Iterable[Piece], names: list[str], by_device: dict[Any, np.ndarray], w0: np.ndarray,
                  w1: np.ndarray, host: np.ndarray, chunk: int) -> Iterator[tuple[np.ndarray, Rows]]:
    """`split_rows` of each device's windows (`by_device`: positions in w0/w1/host, each window's w1 > w0) over
    the device's work as it streams in, at most `chunk` windows at a time: (the windows' positions, their Rows)."""
    held: _Held | None = None
    device: Any = None
    pending = np.zeros(0, np.int64)

    def ready(final: bool) -> Iterator[tuple[np.ndarray, Rows]]:
        nonlocal pending
        assert held is not None
        if not len(held.start):
            return
        # Ready: the first interval starting at or after the window's end has come (all, at the device's end).
        go = np.ones(len(pending), bool) if final else w1[pending] <= held.start[-1]
        now, pending = pending[go], pending[~go]
        work = held.work()
        for at in range(0, len(now), chunk):
            p = now[at:at + chunk]
            yield p, split_rows(work, w0[p], w1[p], host[p], held.pairs)
        # Keep from the first interval a waiting window may start at (its lo: the first whose reach passes its
        # start), and at least the last one.
        keep = len(held.start) - 1
        if len(pending):
            early = pending[w0[pending] < held.reach[-1]]
            if len(early):
                keep = min(keep, int(np.searchsorted(held.reach, w0[early], side="right").min()))
        held.drop(keep)

    for piece in pieces:
        if held is None or piece.device != device:
            if held is not None:
                yield from ready(final=True)
            device, held = piece.device, _Held(names)
            pending = by_device.get(device, np.zeros(0, np.int64))
        if len(pending):  # a device whose windows are all split needs no more of its work
            held.add(piece)
            yield from ready(final=False)
    if held is not None:
        yield from ready(final=True)
