"""The GPU's idle gaps between steps (`IdleGaps`): stretches with no kernel and no memory operation on the GPU that
lie inside no step, each given to the step that follows it. Times in ns."""

from __future__ import annotations

import numpy as np

from traceinsight.ingest.arrow_numpy import numbers
from traceinsight.ingest.store import TraceDB
from traceinsight.model.schedule import IdleGaps
from traceinsight.model.steps import Step, step_times
from traceinsight.queries import sql

# Shortest GPU idle gap between two steps worth recording (ns).
IDLE_GAP_RECORD_NS = 1_000
# Rows of gpu_busy.sql read at a time.
GAP_BATCH_ROWS = 1 << 20


def idle_gaps(db: TraceDB, trace_id: int, steps: list[Step], device_id: int | None) -> IdleGaps:
    """Stretches with nothing on the GPU that lie between steps (inside no step's span), from the first step to
    the last; each is given to the step that follows it. Vectorised: a long trace has a gap between most of its
    kernels, and only those between steps are kept.

    The GPU's work comes in time order (gpu_busy.sql), in record batches; a gap starts at the latest end of
    everything before it (a running maximum carried from batch to batch: work overlaps on several streams) and
    ends at the next start. Numpy over DuckDB's sort: the same gaps a window over the sorted rows gives, at a
    third of its CPU time."""
    if len(steps) < 2:
        return IdleGaps.empty()
    n = len(steps)
    times = step_times(steps)  # from the steps' rows, not two properties each
    step_start, step_end = times["start_ns"], times["end_ns"]
    order = np.lexsort((step_end, step_start))  # stable: steps with equal spans keep their order
    starts = step_start[order]
    reach = np.maximum.accumulate(step_end[order])  # latest end of steps 0..i
    # Step numbers as int32 where they fit: the 10M-kernel export keeps 24M gaps (a third less: 0.2 GB).
    index = np.fromiter((s.index for s in steps), np.int32 if n < 2**31 else np.int64, n)[order]
    lo, hi = int(starts[0]), int(step_end[order[-1]])
    kept: dict[str, list[np.ndarray]] = {"start": [], "end": [], "before": []}
    carry: np.int64 | None = None  # the latest end of the work in the batches before
    # In record batches, each filtered at once: the 10M-kernel export has 25M gaps, of which those between steps
    # are kept. Read from the Arrow buffers: pyarrow's conversions import pandas (a third of a second).
    for batch in db.stream(db.con.sql(sql("gpu_busy"), params={"t": trace_id, "d": device_id}), GAP_BATCH_ROWS):
        if not batch.num_rows:
            continue
        busy_start = numbers(batch.column(0))
        latest = np.maximum.accumulate(numbers(batch.column(1)))
        if carry is None:  # the first row has nothing before it
            g0, g1 = latest[:-1], busy_start[1:]
        else:
            np.maximum(latest, carry, out=latest)
            g0, g1 = np.concatenate(([carry], latest[:-1])), busy_start
        carry = latest[-1]
        gap = (g1 - g0 >= IDLE_GAP_RECORD_NS) & (g1 > lo) & (g0 < hi)
        g0, g1 = g0[gap], g1[gap]
        after = np.searchsorted(starts, g1, side="left")  # first step starting at or after the gap's end
        # Not before the first step, not after the last one, and not inside a step.
        keep = (after > 0) & (after < len(starts))
        keep[keep] = reach[after[keep] - 1] <= g0[keep]
        at = np.flatnonzero(keep)
        kept["start"].append(g0[at])
        kept["end"].append(g1[at])
        kept["before"].append(index[after[at]])
    if not kept["start"]:
        return IdleGaps.empty()
    return IdleGaps(*(np.concatenate(kept[c]) for c in ("start", "end", "before")))
