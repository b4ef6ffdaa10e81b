"""Engine iterations recovered from a trace that marks none: where the GPU waited for the host between forwards.

A serving engine's iteration runs every layer once: its attention launches come in groups of the same size (the
layer count), one group per iteration, and between two groups the host samples, schedules and prepares the next
batch while the GPU idles. Within an iteration the GPU waits little: graph replays and eagerly launched kernels
follow one another. So, over the attention launches of the trace's busiest GPU, in time order:

1. the gap before each launch is the longest stretch, since the launch before it, in which that GPU ran no kernel
   and no memory operation;
2. the boundaries repeat every L launches (the layers) from some offset: the (L, offset) whose gaps stand out most
   from the others (a low quantile of theirs over a high quantile of the rest, so a few host stalls inside
   iterations or a short boundary do not matter) wins, with the fewest layers among equally good ones; a boundary
   whose gap does not stand out is dropped (a prefill iteration may launch twice as many kernels per layer);
3. the trace must look like a model: GEMM (or MoE) kernels run between most consecutive attention launches of a
   group (a kernel benchmark that launches attention alone is not cut into iterations: each launch stays a step).

When no such k exists but the whole trace is one model-like group, it is one iteration. An iteration's window runs
from the first activity after its opening gap to the last before its closing one, on that GPU; the gaps
themselves belong to no iteration (they are what the host took between iterations).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traceinsight.ingest.store import TraceDB
from traceinsight.queries import sql

# Fewest attention launches an iteration of a model holds (layers; a one-layer "model" is a kernel benchmark),
# and most (attention launches per iteration looked for).
MIN_LAYERS = 2
MAX_LAYERS = 1024
# Boundaries are looked for every `layers` launches from an offset r: a (layers, r) scores the BOUNDARY_QUANTILE of
# the gaps at its positions over the INSIDE_QUANTILE of the other gaps (robust to a few stalls inside iterations
# and a few short boundaries). The fewest layers whose score is within NEAR_BEST of the best one wins (a multiple
# of the true count scores as well), and only from MIN_SCORE on.
BOUNDARY_QUANTILE = 0.25
INSIDE_QUANTILE = 0.9
MIN_SCORE = 4.0
NEAR_BEST = 0.8
# A boundary position whose gap is under SEPARATION times the median gap inside iterations is no boundary (a
# prefill iteration may hold twice the launches of a decode one).
SEPARATION = 2.0
# Fewest whole iterations (a multiple of the layer count) the cut must give: one gap alone makes no period.
MIN_WHOLE = 2
# The gaps scanned for the period (the first ones of a long trace); the period found is applied to all.
SCAN_GAPS = 20_000
# Share of consecutive attention launches within an iteration with a GEMM/MoE kernel between them: a model's layers.
LAYER_GEMM_SHARE = 0.5
MODEL_FAMILIES = ("gemm", "moe")


@dataclass(frozen=True, slots=True)
class Iterations:
    """Recovered iterations: per iteration its window on `device_id` (first activity start, last activity end, ns)."""

    device_id: int | None
    windows: list[tuple[int, int]]


def recover(db: TraceDB, trace_id: int) -> Iterations | None:
    """The iterations of trace `trace_id` (see the module docstring), or None when the trace shows none."""
    gpu = db.rows(sql("trace_gpu"), {"trace": trace_id})  # the GPU that ran most of the kernel time
    if not gpu:
        return None
    device = gpu[0]["device_id"]
    rows = db.rows(sql("device_activity"), {"trace": trace_id, "device": device})
    starts = [r["start_ns"] for r in rows]
    ends = [r["end_ns"] for r in rows]
    families = [r["family"] for r in rows]
    attn = [i for i, f in enumerate(families) if f == "attention"]
    if len(attn) < MIN_LAYERS:
        return None
    # idle[i]: the GPU's idle time just before activity i (0 when something still ran).
    idle = [0] * len(rows)
    reach = ends[0]
    for i in range(1, len(rows)):
        idle[i] = max(0, starts[i] - reach)
        reach = max(reach, ends[i])
    # gaps[j]: the longest idle stretch between attention launch j and j + 1; model[j]: a GEMM ran between them.
    gaps, model = [], []
    for a, b in zip(attn, attn[1:], strict=False):
        gaps.append(max(idle[a + 1:b + 1]))
        model.append(any(f in MODEL_FAMILIES for f in families[a + 1:b]))
    cut = _boundaries(gaps, model)
    if cut is None:
        return None
    # Each boundary opens the next iteration at the activity that ended its idle stretch.
    opens = [max(range(attn[j] + 1, attn[j + 1] + 1), key=lambda i: (idle[i], -i)) for j in cut]
    edges = [0, *opens, len(rows)]
    windows = [(starts[a], max(ends[a:b])) for a, b in zip(edges, edges[1:], strict=False)]
    return Iterations(device_id=device, windows=windows)


def _boundaries(gaps: list[int], model: list[bool]) -> list[int] | None:
    """The boundary positions (index j: between attention launch j and j + 1) of the iterations, or None."""
    g = np.asarray(gaps, dtype=np.float64)
    head = g[:SCAN_GAPS]
    scored = []
    for layers in range(MIN_LAYERS, min(MAX_LAYERS, (len(head) + 1) // 2) + 1):
        rows = -(-len(head) // layers)
        grid = np.full(rows * layers, np.nan)
        grid[:len(head)] = head
        low = np.nanquantile(grid.reshape(rows, layers), BOUNDARY_QUANTILE, axis=0)
        r = int(np.nanargmax(low))
        inside = np.quantile(np.sort(head)[:len(head) - rows], INSIDE_QUANTILE) if len(head) > rows else 0.0
        scored.append((float(low[r]) / max(float(inside), 1.0), layers, r))
    top = max((sc for sc, _, _ in scored), default=0.0)
    if top >= MIN_SCORE:
        _, layers, r = next(x for x in scored if x[0] >= NEAR_BEST * top)  # the fewest layers that score as well
        cut = list(range(r, len(g), layers))
        inner = np.delete(g, cut)
        floor = SEPARATION * float(np.median(inner)) if len(inner) else 0.0
        cut = [j for j in cut if g[j] >= floor]  # a prefill iteration may run twice the launches of a decode one
        sizes = np.diff([-1, *cut, len(g)])
        whole = int(np.count_nonzero((sizes >= layers) & (sizes % layers == 0)))
        if cut and whole >= MIN_WHOLE and _model_like(model, cut):
            return cut
    if len(gaps) + 1 >= MIN_LAYERS and _model_like(model, []):
        return []
    return None


def _model_like(model: list[bool], boundaries: list[int]) -> bool:
    """Most consecutive attention launches inside an iteration have a GEMM between them."""
    cut = set(boundaries)
    inner = [m for j, m in enumerate(model) if j not in cut]
    return bool(inner) and sum(inner) >= LAYER_GEMM_SHARE * len(inner)
