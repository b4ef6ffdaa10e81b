"""Each step's window (`traceinsight.model.breakdown`): from its range on the host to the end of its GPU work,
starting no earlier than the end of the window before it on its device."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from traceinsight.model.steps import Step


def step_device(step: Step) -> Any:
    """The GPU of the step's attention launches (the most common one when they differ)."""
    if step.launches:
        first = step.launches[0].attention.device_id
        if all(x.attention.device_id == first for x in step.launches):
            return first
    devices = Counter(x.attention.device_id for x in step.launches)
    return devices.most_common(1)[0][0] if devices else None


def step_windows(steps: Iterable[Step], devices: Mapping[int, Any] | Sequence[Any] | None = None,
             ) -> list[tuple[Step, int, int, str]]:
    """(step, window start, window end, source) per step; windows of one device never overlap. `devices`: each
    step's device by index (`step_device`), when already known."""
    ordered, w0, w1 = _window_arrays(list(steps), devices)
    return [(s, a, b, "gpu-span" if r is None else "cpu-range" if r else "gpu-range")
            for s, a, b, r in zip(ordered, w0.tolist(), w1.tolist(), _ranged(ordered), strict=True)]


def _ranged(steps: list[Step]) -> list[bool | None]:
    """Per step: None without a whole range, else whether it is a CPU range."""
    return [None if s.range_side is None or s.range_start_ns is None or s.range_end_ns is None
            else s.range_side == "cpu" for s in steps]


def _window_arrays(steps: list[Step], devices: Mapping[int, Any] | Sequence[Any] | None,
                   ) -> tuple[list[Step], np.ndarray, np.ndarray]:
    """The steps by device (in the order the devices first occur), each device's by range start (or start) and
    index, with their windows' starts and ends, on arrays: a step's window starts
    no earlier than the end of every window before it on its device (unless its own work lies inside that), and
    that end is the running maximum of the windows' own starts and ends."""
    n = len(steps)
    code: dict[Any, int] = {}
    dev = np.fromiter((code.setdefault(devices[s.index] if devices is not None else step_device(s), len(code))
                       for s in steps), np.int64, n)
    ranged = _ranged(steps)
    has = np.fromiter((r is not None for r in ranged), bool, n)
    cpu = np.fromiter((r is True for r in ranged), bool, n)
    st = np.fromiter((s.start_ns for s in steps), np.int64, n)
    en = np.fromiter((s.end_ns for s in steps), np.int64, n)
    kc = np.fromiter((s.kernel_count for s in steps), np.int64, n) > 0
    rs = np.fromiter((s.range_start_ns if r is not None else 0 for s, r in zip(steps, ranged, strict=True)),
                     np.int64, n)
    re_ = np.fromiter((s.range_end_ns if r is not None else 0 for s, r in zip(steps, ranged, strict=True)),
                      np.int64, n)
    key = np.fromiter((s.range_start_ns if s.range_side is not None else s.start_ns for s in steps), np.int64, n)
    index = np.fromiter((s.index for s in steps), np.int64, n)
    order = np.lexsort((index, key, dev))
    dev, st, en, rs, re_ = dev[order], st[order], en[order], rs[order], re_[order]
    has, cpu, kc = has[order], cpu[order], kc[order]
    w0 = np.where(has, np.where(cpu | ~kc, rs, np.minimum(rs, st)), st)
    w1 = np.where(has, np.where(kc, np.maximum(re_, en), re_), en)
    reach = np.maximum(w0, w1)
    prev = np.empty(n, np.int64)
    first = np.ones(n, bool)
    for d in range(len(code)):
        at = np.flatnonzero(dev == d)
        run = np.maximum.accumulate(reach[at])
        prev[at[1:]] = run[:-1]
        first[at[1:]] = False
    late = ~first & (prev > w0)
    w0 = np.where(late, np.where(~kc | (prev < en), prev, np.minimum(prev, st)), w0)
    w1 = np.maximum(w1, w0)
    return [steps[i] for i in order.tolist()], w0, w1

