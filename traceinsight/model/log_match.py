"""Match the rows of a FlashInfer API log (`traceinsight.ingest.flashinfer_log`: one row per plan() call) to the
trace's steps. A log has no step names, only order: each run() call of a paged-KV wrapper launches one attention
kernel with the plan its wrapper made last, and the calls happen in the order the kernels were launched.

The rule (docs/SIDECAR.md, "FlashInfer API log"):

1. Units. When the log's run() calls are at least as many as the trace's FlashInfer paged-KV attention launches
   (CUDA-core decode, FA2 and SM90 prefill kernels; ragged-KV kernels are not planned by these wrappers), each
   launch is a unit and is paired with a run() call, so a plan serving several steps (or the layers of one step)
   is matched to all of them. Otherwise (CUDA-graph replays call no run(); a log cut short) each step is a unit
   (its first such launch) and is paired with a plan() call.
2. Window. The trace holds a contiguous stretch of the log's calls (logging starts at import, the profiler
   later): the n trace units are paired with calls k .. k+n-1 for the offsets k at which every pair is
   consistent: the wrapper's path fits the kernel (cuda-core with the CUDA-core kernel, tensor-core with a
   prefill kernel), the kernel's KV-head grid dimension equals num_kv_heads, and outside CUDA graphs the
   CUDA-core grid.x equals the batch size when no merge kernel follows (larger when one does), the FA2 grid.x is
   at least the batch size.
3. Decision. Exactly one consistent offset: it is used (with counts equal, k = 0). None, or more than one: no
   step gets a row, and a note says why; a guess would present another step's batch as this one's.

A step gets the row of its first launch's run() (or its own plan() call).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from traceinsight.model.occupancy import CUDA_CORE, FA2, SM90
from traceinsight.model.steps import Launch, Step

FLASHINFER_PAGED = (CUDA_CORE, FA2, SM90)
# Most row/launch comparisons the window search makes before it stops looking for a second fitting window.
MAX_COMPARISONS = 20_000_000


def is_log_row(row: dict[str, Any]) -> bool:
    return row.get("log_call") is not None


def _paged(launch: Launch) -> bool:
    k = launch.attention
    return k.backend in FLASHINFER_PAGED and "Ragged" not in k.name


def consistent(row: dict[str, Any] | None, launch: Launch, graph: bool) -> bool:
    """Whether a plan() row can be what `launch` ran (rule 2 of the module docstring); None (a run() whose
    wrapper had no plan in the log) fits anything."""
    if row is None:
        return True
    k = launch.attention
    path = row.get("path")
    if path == "cuda-core" and k.backend != CUDA_CORE:
        return False
    if path == "tensor-core" and k.backend not in (FA2, SM90):
        return False
    kv = row.get("kv_heads")
    if kv and ((k.backend == CUDA_CORE and k.grid[1] != kv) or (k.backend == FA2 and k.grid[2] != kv)):
        return False
    b = int(row.get("batch_size") or 0)
    if b and not (graph or row.get("cuda_graph")):
        if k.backend == CUDA_CORE:
            return k.grid[0] > b if launch.merges else k.grid[0] == b
        if k.backend == FA2:
            return k.grid[0] >= b
    return True


def _windows(seq: Sequence[dict[str, Any] | None], units: Sequence[Launch],
             fits: Callable[[dict[str, Any] | None, Launch], bool]) -> tuple[list[int], bool]:
    """Offsets k (at most two, the search stops there) at which every unit fits seq[k + i]; and whether the
    search ran to the end (False: it stopped at MAX_COMPARISONS)."""
    found: list[int] = []
    budget = MAX_COMPARISONS
    n = len(units)
    for k in range(len(seq) - n + 1):
        i = 0
        while i < n and fits(seq[k + i], units[i]):
            i += 1
        budget -= i + 1
        if i == n:
            found.append(k)
            if len(found) == 2:
                return found, True
        if budget <= 0:
            return found, False
    return found, True


def match_log(steps: list[Step], rows: list[dict[str, Any]],
              graph_kernels: frozenset[int] = frozenset()) -> tuple[dict[int, dict[str, Any]], str]:
    """Step index -> the log row its attention ran with, and a note saying how (or why nothing matched)."""
    ordered = sorted((s for s in steps if any(_paged(x) for x in s.launches)), key=lambda s: (s.start_ns, s.index))
    if not ordered or not rows:
        return {}, "FlashInfer API log: no FlashInfer paged-KV attention launch in the trace to match its plans to"

    def fits(row: dict[str, Any] | None, launch: Launch) -> bool:
        return consistent(row, launch, launch.attention.kernel_id in graph_kernels)

    launches = [(s, x) for s in ordered for x in s.launches if _paged(x)]
    runs: dict[int, dict[str, Any]] = {int(j): r for r in rows for j in (r.get("log_runs") or [])}
    plans = sorted(rows, key=lambda r: int(r["log_call"]))
    seq: list[dict[str, Any] | None]
    if runs and max(runs) + 1 >= len(launches):
        seq = [runs.get(j) for j in range(max(runs) + 1)]
        units = [x for _, x in launches]
        owners = [s for s, _ in launches]
        what, calls = "attention launches", "run() calls"
    else:
        seq = list(plans)
        units = [next(x for x in s.launches if _paged(x)) for s in ordered]
        owners = ordered
        what, calls = "steps", "plan() calls"
    if len(seq) < len(units):
        return {}, (f"FlashInfer API log: {len(units)} {what} in the trace but only {len(seq)} {calls} in the log: "
                    "not matched (was the log cut short, or does it come from another run?)")
    offsets, complete = _windows(seq, units, fits)
    if not offsets:
        return {}, (f"FlashInfer API log: no stretch of its {len(seq)} {calls} fits the trace's {len(units)} {what} "
                    "(path, KV heads and batch size against each kernel's grid): not matched; is it the log of "
                    "this run?")
    if len(offsets) > 1 or not complete:
        many = "several stretches" if len(offsets) > 1 else "a stretch (the search stopped before it could tell " \
            "whether it is the only one)"
        return {}, (f"FlashInfer API log: {many} of its {len(seq)} {calls} fit the trace's {len(units)} {what} "
                    f"(offsets {', '.join(map(str, offsets))}...): not matched, since the batch of one would be "
                    "taken for another's; log only the profiled stretch (start FLASHINFER_LOGLEVEL's process "
                    "with the profiler, or cut the log to the profiled calls)")
    k = offsets[0]
    out: dict[int, dict[str, Any]] = {}
    for i, (owner, _unit) in enumerate(zip(owners, units, strict=True)):
        row = seq[k + i]
        if row is not None and owner.index not in out:
            out[owner.index] = row
    return out, (f"FlashInfer API log: {len(units)} {what} matched to its {calls} {k}-{k + len(units) - 1} of "
                 f"{len(seq)} (the only stretch "
                 f"consistent with every launch's path, KV heads and batch size); {len(out)} steps got a batch")
