"""The GPU's idle gaps between steps (model/idle_gaps.py) on inline rows: memory operations count as busy, work
overlapping on several streams keeps the GPU busy until its latest end, gaps inside a step or outside the steps
are left out, and the running maximum carries from one record batch to the next."""

from __future__ import annotations

import numpy as np
import pytest
from test_queries import Inline, T

import traceinsight.model.idle_gaps as idle
from traceinsight.model.schedule import IdleGaps
from traceinsight.model.steps import Step


def _step(index: int, start: int, end: int) -> Step:
    return Step(index=index, name=f"s{index}", source="launch", range_id=None, start_ns=start, end_ns=end,
                kernel_count=1, launches=[])


def _gaps(x: Inline, steps: list[Step]) -> list[tuple[int, int, int]]:
    return list(idle.idle_gaps(x.db, T, steps, 0))


@pytest.fixture
def gpu() -> Inline:
    """Three steps' kernels: step 0 on 0..10_000, step 1 on 20_000..30_000 (a long kernel on a second stream
    running to 26_000 under short ones, an idle stretch inside the step), step 2 on 40_000..50_000; a memory copy
    between steps 1 and 2; work past the last step."""
    x = Inline()
    for kid, (a, b, stream) in enumerate([(0, 10_000, 7), (20_000, 21_000, 7), (20_500, 26_000, 8),
                                          (22_000, 23_000, 7), (28_000, 30_000, 7), (40_000, 50_000, 7),
                                          (60_000, 61_000, 7)]):
        x.kernel(kid, "k", "gemm", a, b, stream=stream)
    x.memop(33_000, 34_000)
    return x


@pytest.mark.parametrize("batch_rows", [1 << 20, 1, 2, 3])
def test_gaps_between_steps_only_with_memory_operations_busy(
        gpu: Inline, batch_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(idle, "GAP_BATCH_ROWS", batch_rows)
    steps = [_step(0, 0, 10_000), _step(1, 20_000, 30_000), _step(2, 40_000, 50_000)]
    # 10_000..20_000 before step 1; 30_000..33_000 and 34_000..40_000 before step 2 (the copy splits the gap);
    # 26_000..28_000 lies inside step 1 and 50_000..60_000 after the last step.
    assert _gaps(gpu, steps) == [(10_000, 20_000, 1), (30_000, 33_000, 2), (34_000, 40_000, 2)]
    # The steps in another order (their index says which one a gap is given to); a gap shorter than the record
    # threshold is left out.
    assert _gaps(gpu, steps[::-1]) == _gaps(gpu, steps)
    monkeypatch.setattr(idle, "IDLE_GAP_RECORD_NS", 5_000)
    assert _gaps(gpu, steps) == [(10_000, 20_000, 1), (34_000, 40_000, 2)]


def test_a_long_kernel_keeps_the_gpu_busy_across_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    x = Inline()
    x.kernel(0, "k", "gemm", 0, 1_000)
    x.kernel(1, "k", "gemm", 2_000, 9_000, stream=8)  # covers the short kernels after it
    for kid, a in enumerate(range(3_000, 8_000, 1_500), start=2):
        x.kernel(kid, "k", "gemm", a, a + 100)
    x.kernel(9, "k", "gemm", 12_000, 13_000)
    monkeypatch.setattr(idle, "GAP_BATCH_ROWS", 2)
    steps = [_step(0, 0, 1_000), _step(1, 2_000, 9_000), _step(2, 12_000, 13_000)]
    assert _gaps(x, steps) == [(1_000, 2_000, 1), (9_000, 12_000, 2)]
    assert _gaps(x, steps[:1]) == []


@pytest.mark.parametrize("longest", [5_000, 2**32 - 1, 2**32, 3 * 2**40])
def test_idle_gaps_held_compact_read_back_whole(longest: int) -> None:
    """Gaps are held as start and length (uint32 where every length fits): their ends, lengths, chunks and
    items read back exactly, a gap of 2^32 ns or more included."""
    start = np.array([10, 2**40, 2**41 + 7], np.int64)
    end = start + np.array([1_000, longest, 3], np.int64)
    before = np.array([1, 2, 3], np.int32)
    gaps = IdleGaps(start, end, before)
    assert gaps._dur.dtype == (np.uint32 if longest < 2**32 else np.int64)
    assert gaps.end_ns.tolist() == end.tolist() and gaps.dur_ns.tolist() == (end - start).tolist()
    g0, g1, b = gaps.chunk(1, 3)
    assert (g0.tolist(), g1.tolist(), b.tolist()) == (start[1:].tolist(), end[1:].tolist(), [2, 3])
    assert [tuple(g) for g in gaps] == list(zip(start.tolist(), end.tolist(), [1, 2, 3], strict=True))
    assert gaps[1].dur_ns == longest and gaps[0:2][1].end_ns == int(end[1])
    assert gaps.total_ns() == int((end - start).sum()) and type(gaps.total_ns()) is int
