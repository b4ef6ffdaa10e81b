"""The step breakdown's queries (gpu_work_ordered, gpu_work_devices) on inline tables: every interval in the order
the breakdown splits in, with its launch call, on cases where a process id or a correlation id is missing or
shared."""

from __future__ import annotations

from test_queries import T, _two_steps


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
