"""Where each step's time went: its wall time split into GPU work by component and GPU idle by reason.

A step's *window* is what the engine waits for: from the start of its range on the host (the ProfilerStep /
NVTX / annotation range that groups it) to the end of its last GPU kernel, or the end of the range if the host
stays in the step longer. When the GPU is still busy with the previous step as the range opens, the window
starts where the previous step's window ends, so the windows of a device never overlap and their components
add up to the time the steps took: a slow step is not charged again to the step queued behind it. Steps with
no host range (GPU-side annotations, one launch per step) have their GPU span as window.

Every nanosecond of the window goes to exactly one component:
- GPU busy, by what ran: `attention` (decode attention launches with their merge/combine and prepare kernels),
  `prefill` (attention launches that ran prefill or mixed prefill + decode rows, with theirs), and every other
  kernel family by its label (`gemm`, `norm`, `elementwise`, `communication`, `memory` (copies and sets
  included), `moe`, `other`, ...). Where kernels overlap (several streams), the time is shared equally.
- GPU idle: `idle-host` when the next work's launch call started after the GPU went idle (the GPU waited for
  the host: Python, scheduling, a stall, launch overhead), also idle at the end of a window while the host is
  still inside the step; `idle-wait` when the next work had been launched before the GPU went idle (it waited
  on a synchronisation, a copy, another stream or an event); `idle-unknown` when the trace does not link
  kernels to their launch calls.

Whether idle host time came in a few long stretches (a stall) or many short ones (launch-bound) is kept too:
`host_gap_max_ns` and `host_long_ns` (idle-host time in stretches of at least LONG_HOST_GAP_NS).
"""
from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from traceinsight.components import IDLE_UNKNOWN
from traceinsight.ingest.store import TraceDB
from traceinsight.model.gpu_work import component_of_family as component_of_family
from traceinsight.model.gpu_work import gpu_work
from traceinsight.model.gpu_work import prefill_kernels as prefill_kernels
from traceinsight.model.split_definition import LONG_HOST_GAP_NS as LONG_HOST_GAP_NS
from traceinsight.model.step_breakdown import COMPONENT_NAMES, FIXED, NO_RANGE
from traceinsight.model.step_breakdown import StepBreakdown as StepBreakdown
from traceinsight.model.step_breakdown import components_ns as components_ns
from traceinsight.model.step_windows import step_device, step_windows
from traceinsight.model.steps import Step
from traceinsight.model.window_split import IDLE_BY_CLASS, Rows, overlap_pairs, round_rows, split_rows

# Windows split and made StepBreakdowns at a time (`breakdowns`).
SPLIT_CHUNK = 65_536
# Long idle-host stretches kept per step (with their times, for naming what the host did meanwhile).
MAX_HOST_GAPS = 3


def _emit(rows: Rows, which: list[int], windows: list[tuple[Step, int, int, str]], w0: np.ndarray,
          w1: np.ndarray, host_range_ns: np.ndarray, labels: list[str], arena: array[int],
          out: dict[int, StepBreakdown]) -> None:
    """The StepBreakdowns of windows[which] (their rows: `rows`, windows numbered by position in `which`), their
    numbers appended to `arena`: each window's components rounded to integer ns adding up to its length
    (`round_to`: largest remainders first, ties in component order; zeros dropped), on arrays."""
    n = len(which)
    final = round_rows(rows.win, rows.value, w1 - w0)
    keep = final > 0
    k_win, k_label, k_val = rows.win[keep], rows.label[keep], final[keep]
    cnt = np.bincount(k_win, minlength=n)
    k_pos = np.arange(len(k_win)) - (np.cumsum(cnt) - cnt)[k_win]
    sizes = FIXED + cnt
    offsets = np.cumsum(sizes) - sizes
    piece = np.zeros(int(sizes.sum()), np.int64)
    for j, col in enumerate((w0, w1, host_range_ns, rows.host_max, rows.host_long, rows.idle_n)):
        piece[offsets + j] = col
    piece[offsets[k_win] + FIXED + k_pos] = k_val
    # The components' names per window: one shared tuple per distinct sequence.
    grid = np.full((n, int(cnt.max()) if n else 0), -1, np.int64)
    grid[k_win, k_pos] = k_label
    seqs, seq_of = np.unique(grid, axis=0, return_inverse=True)
    named = []
    for row in seqs.tolist():
        t = tuple(labels[c] for c in row if c >= 0)
        named.append(COMPONENT_NAMES.setdefault(t, t))
    # The longest idle-host stretches of at least LONG_HOST_GAP_NS, longest first (ties in time order).
    gaps: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for w, a, v in zip(rows.long_win.tolist(), rows.long_at.tolist(), rows.long_ns.tolist(), strict=True):
        gaps[w].append((a, a + v))
    base = len(arena)
    arena.frombytes(piece.tobytes())
    for j, (i, at, names) in enumerate(zip(which, (offsets + base).tolist(), np.asarray(seq_of).reshape(-1).tolist(),
                                           strict=True)):
        s, _, _, source = windows[i]
        got = gaps.get(j)
        host_gaps = tuple(sorted(got, key=lambda g: g[0] - g[1])[:MAX_HOST_GAPS]) if got else ()
        out[s.index] = s.breakdown = StepBreakdown._of(named[names], arena, at, source, host_gaps)


def _host_range(s: Step) -> int:
    """The step's range on the host (ns), NO_RANGE without one."""
    if s.range_side == "cpu" and s.range_start_ns is not None and s.range_end_ns is not None:
        return s.range_end_ns - s.range_start_ns
    return NO_RANGE


def breakdowns(db: TraceDB, trace_id: int, steps: list[Step]) -> dict[int, StepBreakdown]:
    """The breakdown of every step (by step index); each step's `breakdown` is set too."""
    if not steps:
        return {}
    work = gpu_work(db, trace_id, steps)
    # Each step's device by index: a list when step i is at position i (as group_steps numbers them; a dict of
    # 10^6 steps is 0.1 GB), else a dict.
    numbered = all(s.index == i for i, s in enumerate(steps))
    devices: Sequence[Any] | dict[int, Any] = ([step_device(s) for s in steps] if numbered
                                               else {s.index: step_device(s) for s in steps})
    windows = step_windows(steps, devices)
    n = len(windows)
    w0 = np.fromiter((w[1] for w in windows), np.int64, n)
    w1 = np.fromiter((w[2] for w in windows), np.int64, n)
    host = np.fromiter((w[3] == "cpu-range" for w in windows), bool, n)
    host_range_ns = np.fromiter((_host_range(w[0]) for w in windows), np.int64, n)
    # Each window's GPU work: its device's, or the only device's when the step's is not known.
    by_device: dict[Any, list[int]] = defaultdict(list)
    for j, (s, a, b, _) in enumerate(windows):
        dev = devices[s.index]
        if dev not in work:
            if len(work) != 1:
                continue
            dev = next(iter(work))
        if b > a:
            by_device[dev].append(j)
    del devices
    names = next(iter(work.values())).names if work else []
    labels = names + list(IDLE_BY_CLASS)
    out: dict[int, StepBreakdown] = {}
    arena: array[int] = array("q")  # every step's numbers, one after the other
    done = np.zeros(n, bool)
    for dev, js in by_device.items():
        wk = work[dev]
        pairs = overlap_pairs(wk)
        # SPLIT_CHUNK windows at a time, each made a StepBreakdown at once (bounds the rows held).
        for at in range(0, len(js), SPLIT_CHUNK):
            part = js[at:at + SPLIT_CHUNK]
            p = np.array(part, np.int64)
            done[p] = True
            _emit(split_rows(wk, w0[p], w1[p], host[p], pairs), part, windows, w0[p], w1[p], host_range_ns[p],
                  labels, arena, out)
    rest = np.flatnonzero(~done)  # windows of no device's work (all idle-unknown), or empty
    if len(rest):
        r0, r1 = w0[rest], w1[rest]
        has = np.flatnonzero(r1 > r0)
        zero, none = np.zeros(len(rest), np.int64), np.zeros(0, np.int64)
        rows = Rows(has, np.full(len(has), labels.index(IDLE_UNKNOWN), np.int64), (r1 - r0)[has].astype(np.float64),
                     zero, zero, zero, none, none, none)
        _emit(rows, rest.tolist(), windows, r0, r1, host_range_ns[rest], labels, arena, out)
    return {s.index: out[s.index] for s, *_ in windows}
