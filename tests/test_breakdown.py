"""The step breakdown (model/breakdown.py): every step's window split into components that add up exactly, on
the real traces; and the split itself on small inline intervals with known answers."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from traceinsight.components import IDLE_HOST, IDLE_UNKNOWN, IDLE_WAIT
from traceinsight.model.gpu_work import Work
from traceinsight.model.split_definition import LONG_HOST_GAP_NS, split
from traceinsight.pipeline import analyze


def _work(rows: list[tuple[int, int, int, str]]) -> Work:
    """Intervals (start, end, launch or -1, component) sorted by start."""
    rows = sorted(rows)
    names: list[str] = []
    comp = []
    for r in rows:
        if r[3] not in names:
            names.append(r[3])
        comp.append(names.index(r[3]))
    start = np.array([r[0] for r in rows], np.int64)
    end = np.array([r[1] for r in rows], np.int64)
    return Work(start, end, np.array([r[2] for r in rows], np.int64), np.array(comp, np.int64),
                 np.maximum.accumulate(end), names)


def test_split_classifies_idle_by_the_next_launch() -> None:
    # GPU: attention 100-200, gemm 260-300 (launched at 250, after the GPU went idle at 200: host-bound),
    # gemm 320-400 (launched at 150, before: a wait), then nothing until the window ends at 500; the next work
    # (at 600) was launched at 550: the tail is host time too.
    w = _work([(100, 200, 90, "attention"), (260, 300, 250, "gemm"), (320, 400, 150, "gemm"),
               (600, 700, 550, "attention")])
    busy, idle = split(w, 50, 500)
    assert dict(busy) == {"attention": 100, "gemm": 120}
    assert idle == [(IDLE_HOST, 50, 50), (IDLE_HOST, 200, 60), (IDLE_WAIT, 300, 20), (IDLE_HOST, 400, 100)]


def test_split_clips_work_that_crosses_the_window_and_shares_overlaps() -> None:
    # Two streams: gemm 0-100 and elementwise 50-150 overlap for 50 ns (shared half and half); the window starts
    # at 20 and ends at 120.
    w = _work([(0, 100, -1, "gemm"), (50, 150, -1, "elementwise")])
    busy, idle = split(w, 20, 120)
    assert busy == {"gemm": pytest.approx(55.0), "elementwise": pytest.approx(45.0)}
    assert idle == []
    # Without launch calls an idle stretch cannot be classified.
    w = _work([(0, 10, -1, "gemm"), (30, 40, -1, "gemm")])
    _, idle = split(w, 0, 40)
    assert idle == [(IDLE_UNKNOWN, 10, 20)]


@pytest.mark.parametrize("name", ["flashinfer_decode_small.pt.trace.json.gz", "flashinfer_decode.sqlite",
                                  "flashinfer_fa2_decode_sweep.pt.trace.json.gz"])
def test_components_add_up_to_the_window_and_windows_do_not_overlap(h200: Path, name: str) -> None:
    _, (a,) = analyze([h200 / name], cache=False)
    assert a.steps
    by_device: dict[object, list[tuple[int, int]]] = defaultdict(list)
    for s in a.steps:
        b = s.breakdown
        assert b is not None
        assert sum(b.components.values()) == b.wall_ns
        assert all(v > 0 for v in b.components.values())
        # The window holds the step's own GPU work, from its range on the host (or its first kernel).
        # (Its first kernel may start up to a microsecond before the window: kernels overlap the previous step's
        # last one under programmatic dependent launch.)
        assert b.end_ns >= s.end_ns and b.wall_ns >= s.dur_ns - max(0, b.start_ns - s.start_ns)
        assert b.start_ns - s.start_ns < 1_000
        assert b.source == ("cpu-range" if s.range_side == "cpu" else "gpu-range" if s.range_side else "gpu-span")
        # The trace links kernels to their launch calls: no idle time is unexplained.
        assert IDLE_UNKNOWN not in b.components
        assert b.host_long_ns <= b.get(IDLE_HOST) and b.host_gap_max_ns <= b.get(IDLE_HOST)
        assert all(g1 - g0 >= LONG_HOST_GAP_NS for g0, g1 in b.host_gaps)
        by_device[s.launches[0].attention.device_id].append((b.start_ns, b.end_ns))
    for windows in by_device.values():
        windows.sort()
        assert all(w0[1] <= w1[0] for w0, w1 in zip(windows, windows[1:], strict=False))


def test_the_host_time_before_a_launch_is_part_of_the_step(h200: Path) -> None:
    """In the small sweep each case's first step spends 80-300 us on the host inside its range before its
    kernel starts (the first run after a re-plan); the later steps were queued while the GPU ran the one before."""
    _, (a,) = analyze([h200 / "flashinfer_decode_small.pt.trace.json.gz"], cache=False)
    firsts = [s for s in a.steps if s.name.endswith("step=0")]
    later = [s for s in a.steps if not s.name.endswith("step=0")]
    assert firsts and later
    for s in firsts:
        assert s.breakdown.get(IDLE_HOST) > 50_000 and s.wall_ns > s.dur_ns
    assert sum(s.breakdown.get(IDLE_HOST) for s in later) < 0.05 * sum(s.wall_ns for s in later)


def test_idle_at_the_end_of_a_host_range_is_the_hosts() -> None:
    """Nothing runs after the window: the host was still inside its range (a CPU range), or the trace cannot
    tell (a GPU span)."""
    w = _work([(0, 100, -1, "gemm")])
    assert split(w, 0, 300, host_range=True)[1] == [(IDLE_HOST, 100, 200)]
    assert split(w, 0, 300)[1] == [(IDLE_UNKNOWN, 100, 200)]


@pytest.mark.parametrize("chunk", [1 << 20, 5])
@pytest.mark.parametrize("name", ["flashinfer_decode_sweep.pt.trace.json.gz", "flashinfer_decode.sqlite"])
def test_idle_gaps_between_steps_leave_out_the_steps_windows(h200: Path, name: str, chunk: int,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu-idle-gaps counts only idle time outside every step's window: the vectorised cut (whole, and `chunk`
    gaps at a time) equals cutting each gap by every window."""
    from traceinsight.diagnose.rules import gpu_idle_gaps

    monkeypatch.setattr(gpu_idle_gaps, "CHUNK_MAX_GAPS", chunk)
    _, (a,) = analyze([h200 / name], cache=False)
    gaps = a.schedule.idle_gaps
    windows = [(s.breakdown.start_ns, s.breakdown.end_ns) for s in a.steps]
    want = 0
    for g in gaps:
        covered = sum(max(0, min(g.end_ns, w1) - max(g.start_ns, w0)) for w0, w1 in windows)
        want += g.dur_ns - covered
    chunks = list(gpu_idle_gaps.outside_window_chunks(gaps, a))
    lo, hi = np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks])
    assert int((hi - lo).sum()) == want
    assert all(not any(w0 < e and s < w1 for w0, w1 in windows) for s, e in zip(lo.tolist(), hi.tolist(), strict=True))
    assert want < sum(g.dur_ns for g in gaps)  # the host time at the start of a step's range is the step's
    found = gpu_idle_gaps.apply(a)  # and the rule, which reduces the cut chunk by chunk, finds the same
    monkeypatch.setattr(gpu_idle_gaps, "CHUNK_MAX_GAPS", len(gaps) + 1)
    assert [f.to_json() for f in found] == [f.to_json() for f in gpu_idle_gaps.apply(a)]


@pytest.mark.parametrize("trace", [
    "../shared/traces/h200/flashinfer_decode_sweep.pt.trace.json.gz",
    "../shared/traces/h200/flashinfer_decode.sqlite",
    "../shared/traces/foreign/tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "examples/loop/loop_core_graph_nsys.sqlite",
    "examples/fa3/sweep_q32kv4d128_fa3_nsys.sqlite",
    "examples/loop/loop_fa2_nsys.sqlite",
])
@pytest.mark.parametrize("chunk", [16_384, 7])
def test_split_many_equals_split_window_by_window(trace: str, chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The vectorised split of every step's window (one pass over all intervals of windows that run one stream
    at a time, FAST_CHUNK windows at a time; the sweep for the others) equals `split` called on each window,
    component by component and idle stretch by idle stretch, on real traces with one and with several streams."""
    from traceinsight.model import window_split
    from traceinsight.model.gpu_work import gpu_work
    from traceinsight.model.split_definition import from_split
    from traceinsight.model.step_windows import step_windows

    monkeypatch.setattr(window_split, "FAST_CHUNK", chunk)
    from traceinsight.pipeline import analyze

    path = Path(__file__).resolve().parents[1] / trace
    assert path.is_file(), f"{trace}: a committed trace is missing"
    db, (a,) = analyze([path], cache=False, diagnostics=False)
    work = gpu_work(db, a.trace_id, a.steps)
    windows = [w for w in step_windows(a.steps) if w[2] > w[1]]
    assert windows
    for wk in work.values():
        w0 = np.array([w[1] for w in windows], np.int64)
        w1 = np.array([w[2] for w in windows], np.int64)
        host = np.array([w[3] == "cpu-range" for w in windows], bool)
        fast = window_split.split_many(wk, w0, w1, host)
        for (_, a0, a1, src), got in zip(windows, fast, strict=True):
            want = from_split(*split(wk, a0, a1, src == "cpu-range"))
            assert got == want and list(got.parts) == list(want.parts), (a0, a1)


@pytest.mark.parametrize("trace", [
    "../shared/traces/h200/flashinfer_decode.sqlite",
    "examples/loop/loop_core_graph_nsys.sqlite",
    "examples/loop/loop_fa2_nsys.sqlite",
])
def test_breakdowns_round_each_window_as_the_plain_definition(trace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`breakdowns` rounds and stores every window's split on arrays, a chunk at a time (SPLIT_CHUNK windows,
    small here: several chunks); each step's StepBreakdown equals the one built from `split` of its window and
    `round_to` (largest remainders, ties in component order), with its longest idle-host stretches."""
    from traceinsight.model import breakdown, window_split
    from traceinsight.model.gpu_work import gpu_work
    from traceinsight.model.split_definition import from_split, round_to
    from traceinsight.model.step_breakdown import StepBreakdown
    from traceinsight.model.step_windows import step_windows

    monkeypatch.setattr(breakdown, "SPLIT_CHUNK", 3)
    monkeypatch.setattr(window_split, "FAST_CHUNK", 2)
    from traceinsight.pipeline import analyze

    path = Path(__file__).resolve().parents[1] / trace
    db, (a,) = analyze([path], cache=False, diagnostics=False)
    breakdown.breakdowns(db, a.trace_id, a.steps)
    got = {s.index: s.breakdown for s in a.steps}
    (wk,) = gpu_work(db, a.trace_id, a.steps).values()
    for s, w0, w1, src in step_windows(a.steps):
        sp = from_split(*split(wk, w0, w1, src == "cpu-range"))
        gaps = sorted(((t, t + ns) for t, ns in sp.long_host), key=lambda g: g[0] - g[1])[:3]
        want = StepBreakdown(w0, w1, src, round_to(sp.parts, w1 - w0),
                             s.range_end_ns - s.range_start_ns if s.range_side == "cpu" else None,
                             sp.host_max_ns, sp.host_long_ns, sp.idle_stretches, tuple(gaps))
        assert got[s.index] == want and list(got[s.index].components) == list(want.components), s.index


def test_round_rows_equals_round_to_window_by_window() -> None:
    """The rounding on arrays gives each window what `round_to` gives it: shares of overlapping work (thirds,
    sevenths) with remainders that tie, windows of one row, and a window of zeros."""
    from traceinsight.model.split_definition import round_to
    from traceinsight.model.window_split import round_rows

    rng = np.random.default_rng(7)
    windows: list[dict[str, float]] = [{"a": 10.0}, {"a": 0.0, "b": 5.0}, {"a": 0.0}]
    for _ in range(300):
        k = int(rng.integers(1, 6))
        parts = {f"c{j}": float(rng.integers(0, 50)) + int(rng.integers(0, 7)) / 7 + (j % 2) / 3 for j in range(k)}
        windows.append(parts)
    totals = [round(sum(p.values())) for p in windows]
    win = np.repeat(np.arange(len(windows)), [len(p) for p in windows])
    value = np.array([v for p in windows for v in p.values()])
    got = round_rows(win, value, np.array(totals, np.int64)).tolist()
    at = 0
    for parts, total in zip(windows, totals, strict=True):
        mine = dict(zip(parts, got[at:at + len(parts)], strict=True))
        at += len(parts)
        assert {c: v for c, v in mine.items() if v > 0} == round_to(parts, total)
        assert sum(mine.values()) == total or total < sum(int(v) for v in parts.values())


def _plain_windows(steps: list) -> list[tuple[object, int, int, str]]:  # type: ignore[type-arg]
    """The windows by their definition, a step at a time (what `step_windows` computes on arrays)."""
    from traceinsight.model.step_windows import step_device

    by_device: dict[object, list] = defaultdict(list)  # type: ignore[type-arg]
    for s in steps:
        by_device[step_device(s)].append(s)
    out = []
    for group in by_device.values():
        group.sort(key=lambda s: (s.range_start_ns if s.range_side is not None else s.start_ns, s.index))
        prev_end = None
        for s in group:
            if s.range_side is not None and s.range_start_ns is not None and s.range_end_ns is not None:
                w0 = s.range_start_ns if s.range_side == "cpu" or not s.kernel_count else min(s.range_start_ns,
                                                                                          s.start_ns)
                w1 = max(s.range_end_ns, s.end_ns) if s.kernel_count else s.range_end_ns
                source = "cpu-range" if s.range_side == "cpu" else "gpu-range"
            else:
                w0, w1, source = s.start_ns, s.end_ns, "gpu-span"
            if prev_end is not None and prev_end > w0:
                w0 = prev_end if not s.kernel_count or prev_end < s.end_ns else min(prev_end, s.start_ns)
            w1 = max(w1, w0)
            out.append((s, w0, w1, source))
            prev_end = w1 if prev_end is None else max(prev_end, w1)
    return out


@pytest.mark.parametrize(("trace", "queued"), [
    ("../shared/traces/h200/flashinfer_decode_sweep.pt.trace.json.gz", True),
    ("../shared/traces/h200/flashinfer_decode.sqlite", False),
    ("examples/loop/loop_core_graph_nsys.sqlite", None),
    ("examples/fa3/serving_q64kv8d128_fa3_torch.pt.trace.json.gz", None),
])
def test_windows_on_arrays_equal_the_definition(trace: str, queued: bool | None) -> None:
    """`step_windows` (a running maximum per device on arrays) gives each step the window the step-at-a-time
    definition gives it, in the same order, including steps queued behind the previous one."""
    from traceinsight.model.step_windows import step_windows
    from traceinsight.pipeline import analyze

    _, (a,) = analyze([Path(__file__).resolve().parents[1] / trace], cache=False, diagnostics=False)
    got = step_windows(a.steps)
    want = _plain_windows(a.steps)
    assert [(s.index, w0, w1, src) for s, w0, w1, src in got] == [(s.index, w0, w1, src) for s, w0, w1, src in want]
    late = any(w0 > (s.range_start_ns if s.range_side else s.start_ns) for s, w0, _, _ in want)
    assert queued is None or late == queued  # steps queued behind the previous one's window


def test_ints_reads_arrow_buffers_with_nulls_and_offsets() -> None:
    import duckdb

    from traceinsight.ingest.arrow_numpy import ints

    con = duckdb.connect()
    got = []
    for batch in con.sql("SELECT CASE WHEN i % 3 = 0 THEN NULL ELSE i END AS x, i::INTEGER AS y "
                         "FROM range(10) t(i)").to_arrow_reader(4):
        got.append((ints(batch.column(0), -1).tolist(), ints(batch.column(1), -1).dtype))
        sliced = batch.slice(1)  # an offset into the buffers
        assert ints(sliced.column(0), -1).tolist() == got[-1][0][1:]
    assert [g[0] for g in got] == [[-1, 1, 2, -1], [4, 5, -1, 7], [8, -1]]
    assert {str(g[1]) for g in got} == {"int32"}


def test_step_breakdown_holds_its_components_in_order() -> None:
    from traceinsight.model.step_breakdown import StepBreakdown

    b = StepBreakdown(10, 110, "cpu-range", {"attention": 60, IDLE_HOST: 30, "gemm": 10}, host_range_ns=90,
                      host_gap_max_ns=30, host_long_ns=0, idle_stretches=1, host_gaps=((20, 50),))
    assert list(b.components.items()) == [("attention", 60), (IDLE_HOST, 30), ("gemm", 10)]
    assert (b.wall_ns, b.gpu_busy_ns, b.idle_ns, b.get("gemm"), b.get("norm")) == (100, 70, 30, 10, 0)
    assert (b.start_ns, b.end_ns, b.host_gap_max_ns, b.host_long_ns, b.idle_stretches) == (10, 110, 30, 0, 1)
    assert b == StepBreakdown(10, 110, "cpu-range", {"attention": 60, IDLE_HOST: 30, "gemm": 10}, 90, 30, 0, 1,
                              ((20, 50),))
    assert b.to_json()["components"] == {"attention": 60, IDLE_HOST: 30, "gemm": 10}


@pytest.mark.parametrize("trace", [
    "../shared/traces/h200/flashinfer_decode_sweep.pt.trace.json.gz",
    "examples/loop/loop_core_graph_nsys.sqlite",
    "examples/fa3/sweep_q32kv4d128_fa3_nsys.sqlite",
])
def test_breakdowns_from_work_streamed_in_small_batches_equal_the_whole(trace: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The step breakdown holds only the GPU work its waiting windows need (model/work_buffer.py): with the work
    streamed 5 intervals at a time (windows split as the work after them comes, most intervals dropped on the
    way) every step's breakdown is the one split over the device's whole work at once."""
    from traceinsight.model import breakdown, gpu_work
    from traceinsight.pipeline import analyze

    path = Path(__file__).resolve().parents[1] / trace
    db, (a,) = analyze([path], cache=False, diagnostics=False)
    breakdown.breakdowns(db, a.trace_id, a.steps)
    whole = [s.breakdown for s in a.steps]
    monkeypatch.setattr(gpu_work, "GPU_WORK_BATCH_ROWS", 5)
    monkeypatch.setattr(breakdown, "SPLIT_CHUNK", 4)
    breakdown.breakdowns(db, a.trace_id, a.steps)
    streamed = [s.breakdown for s in a.steps]
    assert len(whole) > 4 and all(b is not None for b in whole)
    for i, (b, got) in enumerate(zip(whole, streamed, strict=True)):
        assert got is not b and got == b and list(got.components) == list(b.components), i
