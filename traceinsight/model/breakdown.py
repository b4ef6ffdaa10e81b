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

import functools
import itertools
from array import array
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from traceinsight.components import IDLE_UNKNOWN
from traceinsight.ingest.store import TraceDB
from traceinsight.model.gpu_work import work_devices, work_names, work_pieces
from traceinsight.model.row_chunks import CHUNK, chunked
from traceinsight.model.step_breakdown import COMPONENT_NAMES, FIXED, NO_RANGE, BreakdownRows, StepBreakdown, sourced
from traceinsight.model.step_windows import NO_DEVICE, SOURCES, Windows, window_arrays
from traceinsight.model.steps import Step
from traceinsight.model.window_split import IDLE_BY_CLASS, Rows, round_rows
from traceinsight.model.work_buffer import streamed_rows

# Windows split and made StepBreakdowns at a time (`breakdowns`).
SPLIT_CHUNK = 65_536
# Long idle-host stretches kept per step (with their times, for naming what the host did meanwhile).
MAX_HOST_GAPS = 3


def _names(grid: np.ndarray, labels: list[str]) -> list[tuple[str, ...]]:
    """Each window's components' names (its row of `grid`: label numbers, -1 after the last), one shared tuple
    (COMPONENT_NAMES) per distinct sequence. A row is packed into one int64 where it fits, so the sequences are
    told apart by a sort of numbers, not of rows."""
    n, width = grid.shape
    base = len(labels) + 1
    if width * np.log2(base) < 62:
        key = np.zeros(n, np.int64)
        for j in range(width):
            key = key * base + grid[:, j] + 1
        _, first, seq_of = np.unique(key, return_index=True, return_inverse=True)
        seqs = grid[first]
    else:
        seqs, seq_of = np.unique(grid, axis=0, return_inverse=True)
    named = []
    for row in seqs.tolist():
        t = tuple(labels[c] for c in row if c >= 0)
        named.append(COMPONENT_NAMES.setdefault(t, t))
    table = np.empty(len(named), object)
    table[:] = named
    got: list[tuple[str, ...]] = table[np.asarray(seq_of).reshape(-1)].tolist()
    return got


def _emit(rows: Rows, which: np.ndarray, steps: Sequence[Step], w: Windows, labels: list[str],
          arena: array[int]) -> None:
    """The StepBreakdowns of the windows at `which` in `w` (their rows: `rows`, windows numbered by position in
    `which`), their numbers appended to `arena`, each set as its step's `breakdown`: each window's components
    rounded to integer ns adding up to its length (`round_to`: largest remainders first, ties in component order;
    zeros dropped), then its host gaps, on arrays."""
    n = len(which)
    w0, w1 = w.w0[which], w.w1[which]
    final = round_rows(rows.win, rows.value, w1 - w0)
    keep = final > 0
    k_win, k_label, k_val = rows.win[keep], rows.label[keep], final[keep]
    cnt = np.bincount(k_win, minlength=n)
    k_pos = np.arange(len(k_win)) - (np.cumsum(cnt) - cnt)[k_win]
    # The longest idle-host stretches of at least LONG_HOST_GAP_NS, longest first (ties in time order), as
    # (start, end), MAX_HOST_GAPS per window.
    lw, la, ln = rows.long_win, rows.long_at, rows.long_ns
    order = np.lexsort((np.arange(len(lw)), -ln, lw))  # rows come by window, in time order
    lw, la, ln = lw[order], la[order], ln[order]
    counts = np.bincount(lw, minlength=n)
    rank = np.arange(len(lw)) - (np.cumsum(counts) - counts)[lw]
    kept = rank < MAX_HOST_GAPS
    lw, la, ln, rank = lw[kept], la[kept], ln[kept], rank[kept]
    gaps = np.bincount(lw, minlength=n)
    sizes = FIXED + cnt + 1 + 2 * gaps  # the numbers, the components, how many gaps, the gaps
    offsets = np.cumsum(sizes) - sizes
    piece = np.zeros(int(sizes.sum()), np.int64)
    for j, col in enumerate((w0, w1, w.host_range_ns[which], rows.host_max, rows.host_long, rows.idle_n)):
        piece[offsets + j] = col
    piece[offsets[k_win] + FIXED + k_pos] = k_val
    piece[offsets + FIXED + cnt] = gaps
    at = offsets[lw] + FIXED + cnt[lw] + 1 + 2 * rank
    piece[at] = la
    piece[at + 1] = la + ln
    grid = np.full((n, int(cnt.max()) if n else 0), -1, np.int64)
    grid[k_win, k_pos] = k_label
    named = _names(grid, labels)
    base = len(arena)
    arena.frombytes(piece.tobytes())
    # One object per step (the tables and rules read StepBreakdown), made without a Python call per step: its
    # class is its source's, where its numbers start a row of BreakdownRows.
    new = StepBreakdown.__new__
    chosen = _pick(steps, w.at[which])
    classes = _SOURCE_OF[w.source[which]].tolist()
    chunks = itertools.chain.from_iterable(itertools.repeat(c, CHUNK)
                                           for c in chunked([offsets + base], functools.partial(BreakdownRows, arena)))
    for step, cls, names, chunk, row in zip(chosen, classes, named, chunks, itertools.cycle(range(CHUNK))):
        b = new(cls)
        b._names, b._c, b._r = names, chunk, row
        step.breakdown = b


_SOURCE_OF = np.array([sourced(s) for s in SOURCES], object)


def _pick(items: Sequence[Any], at: np.ndarray) -> Sequence[Any]:
    """items[i] for each i of `at`, by one C call (itemgetter)."""
    if len(at) > 1:
        got: Sequence[Any] = itemgetter(*at.tolist())(items)
        return got
    return [items[i] for i in at.tolist()]


def breakdowns(db: TraceDB, trace_id: int, steps: list[Step]) -> None:
    """Set every step's `breakdown` (no map of them by step: 2.3M entries at 10M kernels, which nothing read)."""
    if not steps:
        return
    names = work_names(db)
    devices = work_devices(db, trace_id)
    w = window_arrays(steps, NO_RANGE)
    n = len(w.at)
    host = w.source == 1  # a CPU range: idle at its end is the host's
    # Each window's GPU work: its device's, or the only device's when the step's is not known.
    keys = {NO_DEVICE if d is None else d: d for d in devices}
    sized = w.w1 > w.w0
    by_device: dict[Any, np.ndarray] = {}
    known = np.isin(w.device, np.array(list(keys), np.int64))
    if len(devices) == 1:
        by_device[devices[0]] = np.flatnonzero(sized)
    else:
        distinct, first = np.unique(w.device[known & sized], return_index=True)
        for d in distinct[np.argsort(first)].tolist():  # in the order the devices first occur
            by_device[keys[d]] = np.flatnonzero(sized & (w.device == d))
    labels = names + list(IDLE_BY_CLASS)
    arena: array[int] = array("q")  # every step's numbers, one after the other
    done = np.zeros(n, bool)
    # Each device's work streamed in time order, its windows split (SPLIT_CHUNK at most at once, each made a
    # StepBreakdown at once) as soon as the work they need has come: the work held is bounded by the windows.
    pieces = work_pieces(db, trace_id, steps, names)
    for p, rows in streamed_rows(pieces, names, by_device, w.w0, w.w1, host, SPLIT_CHUNK):
        done[p] = True
        _emit(rows, p, steps, w, labels, arena)
    rest = np.flatnonzero(~done)  # windows of no device's work (all idle-unknown), or empty
    if len(rest):
        r0, r1 = w.w0[rest], w.w1[rest]
        has = np.flatnonzero(r1 > r0)
        zero, none = np.zeros(len(rest), np.int64), np.zeros(0, np.int64)
        rows = Rows(has, np.full(len(has), labels.index(IDLE_UNKNOWN), np.int64), (r1 - r0)[has].astype(np.float64),
                    zero, zero, zero, none, none, none)
        _emit(rows, rest, steps, w, labels, arena)
