"""Why FlashAttention-3 did not cut a request, or cut it too little, from what a launch and its call show.

FA3 (KERNELS.md §5) splits per request in its prepare kernel, up to a static bound S: S is the call's
`num_splits` when forced, else `num_splits_heuristic` (1 when H_kv x m-blocks >= 0.8 x SMs or max_seqlen_k spans
at most 4 KV blocks); past 992 requests the prepare kernel runs on more than one CTA and cuts nothing. So a long
request walked by one CTA per KV head has one of three causes, and one cut into too few splits one of two.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from traceinsight.diagnose.views import LaunchView
from traceinsight.model.batches import fa3_options, planner_batch
from traceinsight.model.gpus import GPU
from traceinsight.model.occupancy import FA3_MAX_DYNAMIC_SPLIT_BATCH
from traceinsight.model.planners import plan

BATCH_CAP = "batch-cap"
FORCED = "forced-num-splits"
HEURISTIC = "static-heuristic"
BOUND = "split-bound"
SHARE = "blocks-per-sm"

# What each reason reads as, in a sentence's middle.
WORDS = {
    BATCH_CAP: f"the batch was above FA3's dynamic-split cap of {FA3_MAX_DYNAMIC_SPLIT_BATCH} requests",
    FORCED: "the call forced num_splits",
    HEURISTIC: "FA3's static heuristic chose a single split",
    BOUND: "the long request reached FA3's static split bound S",
    SHARE: "the batch's total work left few KV blocks per SM to cut it by",
}
# The remedy entry (remedies.toml) of each reason.
REMEDY = {BATCH_CAP: "fa3-batch-cap", FORCED: "fa3-forced-num-splits", HEURISTIC: "fa3-static-heuristic",
          BOUND: "fa3-split-bound", SHARE: "fa3-split-bound"}


def batch_size(v: LaunchView) -> int | None:
    """B from the sidecar, else from the combine kernel's grid (z = B) when one ran."""
    if v.batch_size is not None:
        return v.batch_size
    for m in v.launch.merges:
        if m.backend == "fa3" and m.grid[2] > 0:
            return m.grid[2]
    return None


def _call(v: LaunchView) -> dict[str, Any]:
    return (v.batch.call if v.batch is not None else None) or {}


def static_bound(v: LaunchView) -> int | None:
    """S: the forced num_splits, the sidecar's recorded bound, or the planner's."""
    call = _call(v)
    if isinstance(call.get("num_splits"), int) and call["num_splits"] > 0:
        return int(call["num_splits"])
    if v.batch is not None and v.batch.planned_num_splits:
        return int(v.batch.planned_num_splits)
    p = v.model.plan if v.model is not None else None
    s = p.details.get("num_splits_static") if p is not None else None
    return int(s) if isinstance(s, int) else None


def why_unsplit(v: LaunchView) -> str | None:
    """Why no request of this FA3 launch was cut: BATCH_CAP, FORCED, HEURISTIC, or None when unknown."""
    b = batch_size(v)
    if (b is not None and b > FA3_MAX_DYNAMIC_SPLIT_BATCH) or any(p.grid[0] >= 2 for p in v.launch.prepares):
        return BATCH_CAP
    if _call(v).get("num_splits") == 1:
        return FORCED
    if static_bound(v) == 1:
        return HEURISTIC
    return None


def longest_splits(v: LaunchView) -> int | None:
    """How many splits the longest request got (sidecar metadata, else the planner)."""
    b = v.batch
    if b is None or not b.kv_lens:
        return None
    i = max(range(len(b.kv_lens)), key=lambda j: b.kv_lens[j])  # type: ignore[index]
    if b.planned_splits is not None and len(b.planned_splits) == len(b.kv_lens):
        return int(b.planned_splits[i])
    p = v.model.plan if v.model is not None else None
    return int(p.splits[i]) if p is not None and p.splits else None


def why_starved(v: LaunchView) -> str:
    """Why the longest request of a split FA3 launch got too few splits: FORCED, BOUND or SHARE."""
    s = static_bound(v)
    got = longest_splits(v)
    if got is not None and s is not None and got >= s:
        return FORCED if _call(v).get("num_splits") else BOUND
    return SHARE


def heuristic_splits(v: LaunchView, gpu: GPU | None) -> int | None:
    """The splits FA3's heuristic (num_splits = 0) would give the longest request of this batch (None past
    the cap, where it cuts nothing, or without the batch)."""
    batch = planner_batch(v.batch) if v.batch is not None else None
    if gpu is None or batch is None or batch.batch_size > FA3_MAX_DYNAMIC_SPLIT_BATCH:
        return None
    opts = {**fa3_options(v.launch.attention, v.batch), "num_splits": 0}
    p = plan("fa3", batch, gpu, 1, **opts)
    i = max(range(batch.batch_size), key=lambda j: batch.kv_lens[j])
    return int(p.splits[i]) if p.splits else None


def capped_batch(v: LaunchView) -> Any:
    """The planner batch cut to FA3's cap (the first 992 requests), or None."""
    batch = planner_batch(v.batch) if v.batch is not None else None
    if batch is None or batch.batch_size <= FA3_MAX_DYNAMIC_SPLIT_BATCH:
        return None
    return replace(batch, kv_lens=batch.kv_lens[:FA3_MAX_DYNAMIC_SPLIT_BATCH], qo_lens=None)
