"""The step breakdown's queries (step_gpu_kernels, step_gpu_memops, step_gpu_launches) on inline tables, and the
launch calls found for their rows on arrays (model/launch_calls.py) against the join they replace, on cases where
a process id or a correlation id is missing or shared."""

from __future__ import annotations

import numpy as np
from test_queries import T, _two_steps

from traceinsight.model.launch_calls import NO_LAUNCH, NULL_ID, launch_calls, launch_starts


def test_step_gpu_kernels_gives_each_kernel_its_family_and_link_to_its_launch() -> None:
    x = _two_steps()
    x.kernel(6, "loose", "elementwise", 3000, 3100, corr=None, device=None)
    x.kernel(7, "other_trace", "gemm", 1, 2, corr=1, trace=T + 1)
    got = sorted(x.rows("step_gpu_kernels", trace=T))
    assert got[:3] == [(0, "gemm", 0, 1100, 1200, 1, 1), (1, "attention", 0, 1200, 1400, 2, 1),
                       (2, "merge", 0, 1400, 1450, 3, 1)]
    assert got[-1] == (6, "elementwise", None, 3000, 3100, None, 1) and len(got) == 7


def test_step_gpu_memops_and_launches_read_the_trace_s_rows() -> None:
    x = _two_steps()
    x.memop(1500, 1600, corr=3)
    x.memop(1700, 1800)
    x.launch(99, 5, trace=T + 1)
    assert sorted(x.rows("step_gpu_memops", trace=T)) == [(0, 1500, 1600, 3), (0, 1700, 1800, None)]
    got = x.rows("step_gpu_launches", trace=T)
    assert sorted(got) == [(1, 1, 1010), (2, 1, 1020), (3, 1, 1030), (11, 1, 2010), (12, 1, 2020), (13, 1, 2030)]


def _join(calls: list[tuple[int, int | None, int]], corr: int | None, pid: int | None, memop: bool) -> int:
    """The launch start by the SQL join's definition: the earliest call of the kernel's (correlation id, process),
    a NULL process matching a NULL one; else, for a kernel of NULL process or a memory operation, the earliest call
    of the correlation id whatever the process."""
    if corr is None:
        return NO_LAUNCH
    same = [s for c, p, s in calls if c == corr]
    own = [s for c, p, s in calls if c == corr and p == pid]
    if not memop and own:
        return min(own)
    return min(same) if same and (memop or pid is None) else NO_LAUNCH


def test_launch_starts_equal_the_join() -> None:
    rng = np.random.default_rng(3)
    for distinct in (True, False):
        calls: list[tuple[int, int | None, int]] = []
        for c in range(60):
            for _ in range(1 if distinct else int(rng.integers(1, 4))):
                p = None if rng.random() < 0.2 else int(rng.integers(1, 4))
                calls.append((c * 7, p, int(rng.integers(0, 10_000))))
        if not distinct:
            rng.shuffle(calls)  # type: ignore[arg-type]
        found = launch_calls(np.array([c for c, _, _ in calls], np.int64),
                             np.array([NULL_ID if p is None else p for _, p, _ in calls], np.int64),
                             np.array([s for _, _, s in calls], np.int64))
        rows = [(None if rng.random() < 0.1 else int(rng.integers(0, 60)) * 7 + int(rng.random() < 0.2),
                 None if rng.random() < 0.2 else int(rng.integers(1, 5))) for _ in range(400)]
        corr = np.array([NULL_ID if c is None else c for c, _ in rows], np.int64)
        pid = np.array([NULL_ID if p is None else p for _, p in rows], np.int64)
        assert launch_starts(found, corr, pid).tolist() == [_join(calls, c, p, False) for c, p in rows]
        assert launch_starts(found, corr).tolist() == [_join(calls, c, p, True) for c, p in rows]
    empty = launch_calls(*(np.zeros(0, np.int64),) * 3)
    assert launch_starts(empty, np.array([1, NULL_ID])).tolist() == [NO_LAUNCH, NO_LAUNCH]


def test_gpu_work_ordered_gives_every_interval_in_order_with_its_launch_call() -> None:
    """gpu_work_ordered: kernels and memory operations of the trace by device (-1: not known), start, end, kernels
    first at a tie, each with the start of its launch call as `_join` defines it (NULL process ids and correlation
    ids included), and gpu_work_devices the devices in that order."""
    x = _two_steps()
    x.kernel(6, "loose", "elementwise", 3000, 3100, corr=None, device=None)
    x.kernel(7, "other_trace", "gemm", 1, 2, corr=1, trace=T + 1)
    x.kernel(8, "tie", "norm", 1100, 1200, corr=12, device=0)  # the gemm's start and end: after it (table order)
    x.memop(1100, 1200, corr=3)  # a tie with both kernels: after them
    x.memop(1050, 1060)
    x.launch(12, 1005, trace=T + 1)  # another trace's call is not this trace's
    x.db.sql("INSERT INTO launches VALUES ($t, 3, 'cudaMemcpyAsync', 900, 905, 2, 11)", {"t": T})  # corr 3, pid 2
    x.db.sql("UPDATE kernels SET process_id = NULL WHERE kernel_id = 2")  # merge (corr 3): any process's call
    got = x.rows("gpu_work_ordered", trace=T)
    assert got == [
        (-1, 3000, 3100, -1, "elementwise", 6),
        (0, 1050, 1060, -1, "memory", -1),
        (0, 1100, 1200, 1010, "gemm", 0),
        (0, 1100, 1200, 2020, "norm", 8),
        (0, 1100, 1200, 900, "memory", -1),  # the earliest call of corr 3, whatever its process
        (0, 1200, 1400, 1020, "attention", 1),
        (0, 1400, 1450, 900, "merge", 2),  # NULL process, no call of NULL process: the earliest of its corr
        (0, 2100, 2200, 2010, "gemm", 3),
        (0, 2200, 2400, 2020, "attention", 4),
        (0, 2400, 2450, 2030, "merge", 5),
    ]
    assert x.rows("gpu_work_devices", trace=T) == [(-1,), (0,)]
    x.db.sql("UPDATE kernels SET process_id = 7 WHERE kernel_id = 0")  # a process with no call of its corr
    assert [r[3] for r in x.rows("gpu_work_ordered", trace=T) if r[5] == 0] == [-1]
