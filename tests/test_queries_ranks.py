"""The multi-rank run's named queries (model/ranks.py) on small inline tables, as tests/test_queries.py runs the
others."""

from __future__ import annotations

from test_queries import Inline, T


def test_rank_kernels_gives_every_kernel_its_family_and_earliest_launch_in_start_order() -> None:
    x = Inline()
    x.launch(1, 100)
    x.launch(2, 150)
    x.launch(2, 140, thread=12)  # the same correlation id from a second call: the earliest start is kept
    x.kernel(0, "gemm", "gemm", 500, 600, corr=1)
    x.kernel(1, "ncclKernel_AllReduce_RING_LL_Sum_float", "communication", 300, 900, backend="nccl", corr=2,
             stream=9)
    x.kernel(2, "gemm", "gemm", 650, 700, corr=None)  # no launch call known
    x.kernel(0, "gemm", "gemm", 10, 20, corr=1, trace=T + 1)  # another trace
    got = x.rows("rank_kernels", trace=T)
    assert [(r[0], r[2], r[3], r[4], r[7], r[8], r[9], r[10]) for r in got] == [
        (1, "communication", "nccl", 9, 300, 900, 600, 140),
        (0, "gemm", None, 7, 500, 600, 100, 100),
        (2, "gemm", None, 7, 650, 700, 50, None),
    ]


def test_rank_steps_lists_the_host_profiler_steps_of_one_trace_in_order() -> None:
    x = Inline()
    x.range("ProfilerStep#2", 2000, 2900, kind="profiler_step")
    x.range("ProfilerStep#1", 1000, 1900, kind="profiler_step")
    x.range("forward", 1000, 1500)
    x.range("ProfilerStep#1", 1100, 1800, side="gpu", kind="profiler_step", thread=None, device=0)
    x.range("ProfilerStep#9", 0, 10, kind="profiler_step", trace=T + 1)
    assert x.rows("rank_steps", trace=T) == [("ProfilerStep#1", 1000, 1900), ("ProfilerStep#2", 2000, 2900)]


def test_collective_args_gives_each_correlation_id_its_last_recorded_arguments() -> None:
    x = Inline()
    rows = [(T, 7, "allreduce", 100, 100, 2, "Float", "0", "default_pg", "[0, 1]", 3),
            (T, 5, "send", 8, None, 2, "BFloat16", "1", None, "[0, 1]", None),
            (T, 7, "allreduce", 100, 100, 2, "Float", "0", "default_pg", "[0, 1]", 4),  # the same id again: kept
            (T + 1, 9, "allgather", 1, 2, 2, "Float", "0", "default_pg", "[0, 1]", 0)]  # another trace
    for r in rows:
        x.db.sql("INSERT INTO collectives VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", list(r))
    assert x.rows("collective_args", trace=T) == [
        (5, "send", 8, None, 2, "BFloat16", "1", None, "[0, 1]", None),
        (7, "allreduce", 100, 100, 2, "Float", "0", "default_pg", "[0, 1]", 4)]
