"""Each step's window (`traceinsight.model.breakdown`): from its range on the host to the end of its GPU work,
starting no earlier than the end of the window before it on its device. On arrays: the steps' fields are read in
one pass (`operator.attrgetter`, no Python frame per step), and a device's running window end is the running
maximum of its windows' own starts and ends (np.maximum.accumulate)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

from traceinsight.model.steps import NO_TIME, Step, step_times

# A window's source by its code in `Windows.source`.
SOURCES = ("gpu-span", "cpu-range", "gpu-range")
# A device id of None (no launch, or the trace does not say) as an int64.
NO_DEVICE = np.iinfo(np.int64).min
_FIELDS = attrgetter("kernel_count", "range_side", "launches")
_DEVICE = attrgetter("attention.device_id")


def step_device(step: Step) -> Any:
    """The GPU of the step's attention launches (the most common one when they differ)."""
    if step.launches:
        first = step.launches[0].attention.device_id
        if all(x.attention.device_id == first for x in step.launches):
            return first
    devices = Counter(x.attention.device_id for x in step.launches)
    return devices.most_common(1)[0][0] if devices else None


@dataclass
class Windows:
    """The steps' windows in order (by device in the order the devices first occur, then by range start, or
    start, and index): each one's step (position in the steps given), start, end, source (index into SOURCES),
    device (NO_DEVICE for None) and range on the host (end - start of a CPU range, else None as `no_range`)."""

    at: np.ndarray
    w0: np.ndarray
    w1: np.ndarray
    source: np.ndarray
    device: np.ndarray
    host_range_ns: np.ndarray


def _ints(values: Sequence[Any], null: int) -> tuple[np.ndarray, np.ndarray]:
    """Python ints or None as int64 (None as `null`) and where they are None, without a Python frame per value."""
    obj = np.array(values, object)
    none = obj == None  # noqa: E711 (elementwise on an object array)
    if none.any():
        obj[none] = null
    return obj.astype(np.int64), none


def _devices(steps: Sequence[Step], launches: Sequence[Sequence[Any]]) -> np.ndarray:
    """`step_device` of every step as int64 (NO_DEVICE for None): the first launch's device where all of the
    step's launches ran on it (nearly every step), else `step_device` itself."""
    n = len(steps)
    counts = np.fromiter(map(len, launches), np.int64, n)
    flat, _ = _ints(list(map(_DEVICE, chain.from_iterable(launches))), NO_DEVICE)
    out = np.full(n, NO_DEVICE, np.int64)
    has = np.flatnonzero(counts)
    if not len(has):
        return out
    firsts = (np.cumsum(counts) - counts)[has]
    out[has] = flat[firsts]
    mixed = has[np.minimum.reduceat(flat, firsts) != np.maximum.reduceat(flat, firsts)]
    for i in mixed.tolist():
        d = step_device(steps[i])
        out[i] = NO_DEVICE if d is None else d
    return out


def window_arrays(steps: Sequence[Step], no_range: int) -> Windows:
    """Every step's window (`Windows`): a step's window starts no earlier than the end of every window before it
    on its device (unless its own work lies inside that), and that end is the running maximum of the windows'
    own starts and ends."""
    n = len(steps)
    kc_, side_, launches = zip(*map(_FIELDS, steps), strict=True) if n else ((),) * 3
    device = _devices(steps, launches)
    del launches
    times = step_times(steps)  # from the steps' rows, not four properties each
    st, en = times["start_ns"], times["end_ns"]
    kc = np.array(kc_, np.int64) > 0
    side = np.array(side_, object)
    no_start, no_end = times["range_start_ns"] == NO_TIME, times["range_end_ns"] == NO_TIME
    rs, re = np.where(no_start, 0, times["range_start_ns"]), np.where(no_end, 0, times["range_end_ns"])
    sided = side != None  # noqa: E711
    has = sided & ~no_start & ~no_end  # a whole range
    cpu = has & (side == "cpu")
    source = np.where(has, np.where(cpu, 1, 2), 0).astype(np.int8)
    key = np.where(sided, rs, st)  # a step with a range side but no start sorts at 0, as before
    # Each device's number, in the order the devices first occur.
    distinct, first = np.unique(device, return_index=True)
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    code = rank[np.searchsorted(distinct, device)]
    order = np.lexsort((np.arange(n), key, code))
    dev, st, en, rs, re = code[order], st[order], en[order], rs[order], re[order]
    has, cpu, kc = has[order], cpu[order], kc[order]
    w0 = np.where(has, np.where(cpu | ~kc, rs, np.minimum(rs, st)), st)
    w1 = np.where(has, np.where(kc, np.maximum(re, en), re), en)
    reach = np.maximum(w0, w1)
    prev = np.empty(n, np.int64)
    first_of_device = np.ones(n, bool)
    starts = np.flatnonzero(np.concatenate(([True], dev[1:] != dev[:-1]))) if n else np.zeros(0, np.int64)
    for a, b in zip(starts.tolist(), [*starts[1:].tolist(), n], strict=True):
        run = np.maximum.accumulate(reach[a:b])
        prev[a + 1:b] = run[:-1]
        first_of_device[a + 1:b] = False
    late = ~first_of_device & (prev > w0)
    w0 = np.where(late, np.where(~kc | (prev < en), prev, np.minimum(prev, st)), w0)
    w1 = np.maximum(w1, w0)
    return Windows(order, w0, w1, source[order], device[order], np.where(cpu, re - rs, no_range))


def step_windows(steps: Sequence[Step]) -> list[tuple[Step, int, int, str]]:
    """(step, window start, window end, source) per step, in `window_arrays`'s order; windows of one device never
    overlap."""
    w = window_arrays(steps, 0)
    return [(steps[i], a, b, SOURCES[c]) for i, a, b, c in zip(w.at.tolist(), w.w0.tolist(), w.w1.tolist(),
                                                               w.source.tolist(), strict=True)]
