"""The step breakdown's queries (gpu_work_ordered, gpu_work_devices, gpu_work_calls) on inline tables, and the
launch calls found for their rows on arrays (model/launch_calls.py) against the join they replace, on cases where
a process id or a correlation id is missing or shared; the launch starts the streamed work carries."""

from __future__ import annotations

import numpy as np
from test_queries import T, _two_steps

from traceinsight.model.gpu_work import work_names, work_pieces
from traceinsight.model.launch_calls import NO_LAUNCH, NULL_ID, launch_calls, launch_starts


def test_gpu_work_ordered_gives_every_interval_in_order() -> None:
    """gpu_work_ordered: kernels and memory operations of the trace by device (-1: not known), start, end, kernels
    first at a tie (in table order), with their correlation and process ids; gpu_work_devices the devices in that
    order; gpu_work_calls the trace's calls of a range of correlation ids."""
    x = _two_steps()
    x.kernel(6, "loose", "elementwise", 3000, 3100, corr=None, device=None)
    x.kernel(7, "other_trace", "gemm", 1, 2, corr=1, trace=T + 1)
    x.kernel(8, "tie", "norm", 1100, 1200, corr=12, device=0)  # the gemm's start and end: after it (table order)
    x.memop(1100, 1200, corr=3)  # a tie with both kernels: after them
    x.memop(1050, 1060)
    x.launch(12, 1005, trace=T + 1)  # another trace's call is not this trace's
    x.db.sql("UPDATE kernel_rows SET process_id = NULL WHERE kernel_id = 2")
    assert x.rows("gpu_work_ordered", trace=T) == [
        (-1, 3000, 3100, None, 1, "elementwise", 6),
        (0, 1050, 1060, None, None, "memory", -1),
        (0, 1100, 1200, 1, 1, "gemm", 0),
        (0, 1100, 1200, 12, 1, "norm", 8),
        (0, 1100, 1200, 3, None, "memory", -1),
        (0, 1200, 1400, 2, 1, "attention", 1),
        (0, 1400, 1450, 3, None, "merge", 2),
        (0, 2100, 2200, 11, 1, "gemm", 3),
        (0, 2200, 2400, 12, 1, "attention", 4),
        (0, 2400, 2450, 13, 1, "merge", 5),
    ]
    assert x.rows("gpu_work_devices", trace=T) == [(-1,), (0,)]
    assert sorted(x.rows("gpu_work_calls", trace=T, lo=2, hi=11)) == [(2, 1, 1020), (3, 1, 1030), (11, 1, 2010)]


def test_streamed_work_carries_each_interval_s_launch_call(monkeypatch: object) -> None:
    """work_pieces: each interval's launch start as `_join` defines it, the calls read a range of correlation ids
    at a time (ranges cut at gaps of more than CALL_RANGE_GAP ids; 3 here), record batches of 4 rows."""
    import pytest

    from traceinsight.model import gpu_work

    mp = pytest.MonkeyPatch()
    mp.setattr(gpu_work, "CALL_RANGE_GAP", 3)
    mp.setattr(gpu_work, "GPU_WORK_BATCH_ROWS", 4)
    x = _two_steps()
    x.kernel(8, "tie", "norm", 1100, 1200, corr=12, device=0)
    x.memop(1100, 1200, corr=3)
    x.memop(1050, 1060)
    x.db.sql("INSERT INTO launches VALUES ($t, 3, 'cudaMemcpyAsync', 900, 905, 2, 11)", {"t": T})  # corr 3, pid 2
    x.db.sql("UPDATE kernel_rows SET process_id = NULL WHERE kernel_id = 2")  # merge (corr 3): any process's call
    x.db.sql("UPDATE kernel_rows SET process_id = 7 WHERE kernel_id = 3")  # gemm (corr 11): no call of process 7
    pieces = list(work_pieces(x.db, T, [], work_names(x.db)))
    mp.undo()
    assert [len(p.start) for p in pieces] == [4, 4, 1]
    got = np.concatenate([p.launch for p in pieces]).tolist()
    #       memop  gemm  norm  memop(3) attention merge(NULL pid) gemm(pid 7) attention merge
    assert got == [NO_LAUNCH, 1010, 2020, 900, 1020, 900, NO_LAUNCH, 2020, 2030]


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
