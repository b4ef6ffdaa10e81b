"""What every runner of the simulator shares (traceinsight.model.simulate drives them): the `Segment` of one work
item's residence, the `Run` a loop hands back, the tail's bookkeeping and its constants."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from typing import NamedTuple

from traceinsight.model.planners.types import WorkItem

EPS = 1e-9  # completions within this (relative) of each other are handled together
TAIL_FRACTION_OF_SMS = 0.5  # the tail: time during which fewer than this share of the SMs is busy
TAIL_ITEM_SHARE = 0.05  # an item belongs to the tail when resident for at least this share of it


class Segment(NamedTuple):
    """One work item's residence on an SM: [start_ns, end_ns) on SM `sm`, slot/worker `slot`. A named tuple: a
    serving launch has 10^3-10^4 of them, made at C speed from the loop's tuples (`_segments`)."""

    sm: int
    slot: int
    start_ns: float
    end_ns: float
    item: WorkItem




_as_segment = partial(tuple.__new__, Segment)
START_NS = itemgetter(Segment._fields.index("start_ns"))
END_NS = itemgetter(Segment._fields.index("end_ns"))


def as_segments(rows: Iterable[tuple[int, int, float, float, WorkItem]]) -> tuple[Segment, ...]:
    """Segments of (sm, slot, start_ns, end_ns, item) tuples, in order."""
    return tuple(map(_as_segment, rows))


@dataclass
class Run:
    """What a simulation loop hands back: end time (ns), per-SM busy time, the tail, and with detail the
    segments in completion order (CTAs completing together: in dispatch order)."""

    t: float
    busy: list[float]
    tail_ns: float
    tail_intervals: list[tuple[float, float]]
    segments: tuple[Segment, ...] = ()


def add_tail(intervals: list[tuple[float, float]], t: float, dt: float) -> None:
    """Append [t, t + dt) to the tail, extending the last interval when it ends at t."""
    if intervals and abs(intervals[-1][1] - t) <= EPS * max(t, 1.0):
        intervals[-1] = (intervals[-1][0], t + dt)
    else:
        intervals.append((t, t + dt))

