"""Which host call launched each piece of GPU work, on arrays: the start of the launch call (`launches`) a kernel or
memory operation shares its correlation id with (and, for a kernel, its process), found by binary search in the
calls sorted once, where a join in DuckDB built two hash tables of every call (2.6M on the 1M-kernel export: 2 of
the step breakdown's 5 CPU-s)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traceinsight.ingest.arrow_numpy import sorted_distinct

# A NULL process id (or correlation id) as an int64: a NULL process matches only a NULL process (IS NOT DISTINCT
# FROM); a NULL correlation id matches nothing.
NULL_ID = np.iinfo(np.int64).min
# The launch start of work whose launch call is not known.
NO_LAUNCH = -1


@dataclass
class LaunchCalls:
    """The launch calls of a trace, for lookups: per correlation id (sorted) the earliest start of its calls over
    every process, and per (correlation id, process) pair (sorted by `key`) the earliest start of its calls."""

    corr: np.ndarray  # the distinct correlation ids, sorted
    first: np.ndarray  # per correlation id: the earliest start of its calls, whatever their process
    pids: np.ndarray  # the distinct process ids of the calls, sorted (NULL_ID for NULL)
    key: np.ndarray  # per pair: its correlation id's position in `corr` * len(pids) + its process's in `pids`
    pair_start: np.ndarray  # per pair: the earliest start of its calls


def launch_calls(corr: np.ndarray, pid: np.ndarray, start: np.ndarray) -> LaunchCalls:
    """The calls (correlation id, process id or NULL_ID, start; int64 arrays) sorted for lookups. A trace's
    correlation ids are mostly distinct and already rising: then a stable sort of them is all it takes."""
    if len(corr) > 1 and bool((corr[1:] > corr[:-1]).all()):  # distinct and rising: each call is its own pair
        pids = pid[:1] if bool((pid == pid[0]).all()) else sorted_distinct(pid)
        key = np.arange(len(corr), dtype=np.int64) * len(pids) + np.searchsorted(pids, pid)
        return LaunchCalls(corr, start, pids, key, start)
    order = np.argsort(corr, kind="stable")
    c = corr[order]
    if len(c) > 1 and bool((c[1:] == c[:-1]).any()):  # a correlation id of several calls: by process, start too
        order = np.lexsort((start, pid, corr))
        c = corr[order]
    p, s = pid[order], start[order]
    del order
    new_corr = np.ones(len(c), bool)
    new_corr[1:] = c[1:] != c[:-1]
    new_pair = new_corr.copy()
    new_pair[1:] |= p[1:] != p[:-1]
    corr_at, pair_at = np.flatnonzero(new_corr), np.flatnonzero(new_pair)
    pids = p[:1] if len(p) and bool((p == p[0]).all()) else sorted_distinct(p)
    position = np.cumsum(new_corr)[pair_at] - 1  # each pair's correlation id's position in the distinct ones
    key = position * len(pids) + np.searchsorted(pids, p[pair_at])
    first = np.minimum.reduceat(s, corr_at) if len(s) else s
    return LaunchCalls(c[corr_at], first, pids, key, s[pair_at])


def launch_starts(calls: LaunchCalls, corr: np.ndarray, pid: np.ndarray | None = None) -> np.ndarray:
    """The start of each row's launch call (NO_LAUNCH when none): the earliest call of its correlation id and
    process (`pid` given: kernels); of its correlation id whatever the process (`pid` None: memory operations; and
    a kernel of NULL process with no call of NULL process)."""
    if not len(calls.corr):
        return np.full(len(corr), NO_LAUNCH, np.int64)
    i = np.minimum(np.searchsorted(calls.corr, corr), len(calls.corr) - 1)
    hit = (calls.corr[i] == corr) & (corr != NULL_ID)
    any_process = np.where(hit, calls.first[i], NO_LAUNCH)
    if pid is None:
        return any_process
    j = np.minimum(np.searchsorted(calls.pids, pid), len(calls.pids) - 1)
    key = i * len(calls.pids) + j
    m = np.minimum(np.searchsorted(calls.key, key), len(calls.key) - 1)
    own = hit & (calls.pids[j] == pid) & (calls.key[m] == key)
    out: np.ndarray = np.where(own, calls.pair_start[m], np.where(pid == NULL_ID, any_process, NO_LAUNCH))
    return out
