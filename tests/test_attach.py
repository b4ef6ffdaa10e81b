"""The schedule model attached to real traces (traceinsight.model.attach): thresholds, batch compositions from
the sidecar or bounded from the trace, per-launch plans and simulations, ncu measurements, idle gaps.

Independent checks: kernel attributes from a json.load of the Kineto file (CUDA-core: 56 registers, block
(16, 8, 1), 9216 B shared memory, grid (x, 4, 1); FA2: 183 registers, block (32, 1, 4), grid (x, 1, 4)); batch
sizes and plan_info from the meta files; sm__cycles_active from the ncu CSV (skew80 B = 256: avg 797242.58,
max 1020054 -> idle 0.218)."""

from __future__ import annotations

import statistics

from test_diagnose_common import SWEEP_META, case_of, fa2, meta_cases, sweep

from traceinsight.model.launch_models import imbalance, is_balanced
from traceinsight.model.schedule import KernelThreshold


def test_every_sweep_step_gets_its_sidecar_batch() -> None:
    a = sweep(True)
    cases = meta_cases(SWEEP_META)
    assert len(a.steps) == 390 and len(a.schedule.batches) == 390
    for st in a.steps:
        b = a.schedule.batches[st.index]
        c = cases[case_of(st.name)]
        assert b.source == "sidecar" and b.batch_size == c["B"] and b.kv_lens == tuple(c["kv_lens"])
        assert (b.qo_heads, b.kv_heads, b.head_dim, b.page_size) == (32, 4, 128, 16)


def test_plans_reproduce_every_traced_grid_and_split() -> None:
    a = sweep(True)
    cases = meta_cases(SWEEP_META)
    for st in a.steps:
        launch = st.launches[0]
        m = a.schedule.models[launch.attention.kernel_id]
        assert m.source == "sidecar" and m.grid_matches is True
        info = cases[case_of(st.name)]["plan_info"]
        if len(info) == 10:  # CUDA-core: [padded_batch_size, ..., split_kv]
            assert m.plan.padded_batch_size == info[0] and m.split_kv == bool(info[-1]) == launch.split_kv
        else:  # SM90 never splits
            assert m.split_kv is False


def test_simulated_times_track_the_measured_ones() -> None:
    a = sweep(True)
    errors: dict[str, list[float]] = {}
    for st in a.steps:
        k = st.launches[0].attention
        m = a.schedule.models[k.kernel_id]
        errors.setdefault(k.backend, []).append(abs(m.predicted_ns / k.dur_ns - 1))
    for backend, errs in errors.items():
        assert len(errs) == 195
        assert statistics.median(errs) < 0.05, backend
        assert max(errs) < 0.25, backend


def test_calibration_uses_balanced_launches() -> None:
    a = sweep(True)
    assert set(a.schedule.costs) == {st.launches[0].attention.name for st in a.steps}
    cc = next(m for m in a.schedule.models.values() if m.plan is not None and m.plan.backend == "flashinfer-cuda-core"
              and m.plan.batch.batch_size == 512 and max(m.plan.batch.kv_lens) == 209715)
    assert not is_balanced(cc.plan) and imbalance(cc.plan) > 100  # one 209,715-token item vs a ~511 mean
    assert cc.sm_idle > 0.9 and cc.tail_ns > 0.9 * cc.predicted_ns
    assert not any("no balanced" in n for n in a.schedule.notes)


def test_trace_only_bounds_the_batch() -> None:
    a = sweep(False)
    s = a.schedule
    by_name = {st.name: s.batches[st.index] for st in a.steps}
    # Split off (no merge kernel): grid.x is B.
    b = by_name["decode tc=0 dist=skew80 bs=384 step=0"]
    assert b.source == "trace" and b.batch_size == 384 and b.kv_lens is None
    # Split on: grid.x counts work items; the merge grid 1056 = 8 x 132 bounds B x 32 heads to (924, 1056].
    b = by_name["decode tc=0 dist=uniform bs=32 step=0"]
    assert (b.batch_size, b.batch_size_min, b.batch_size_max) == (None, 29, 33)
    # Merge grid at its occupancy cap (12 x 132): only B < B_th = 297 is known.
    b = by_name["decode tc=0 dist=skew40 bs=96 step=0"]
    assert (b.batch_size, b.batch_size_min, b.batch_size_max) == (None, 1, 295)
    # SM90: a persistent grid of 132 says nothing about B.
    b = by_name["decode tc=1 dist=uniform bs=8 step=0"]
    assert b.batch_size is None and b.batch_size_max is None
    for st in a.steps:
        m = s.models[st.launches[0].attention.kernel_id]
        assert m.source == "trace" and m.predicted_ns is None and m.split_kv is st.launches[0].split_kv


def test_threshold_json_keys() -> None:
    [t] = fa2(False).schedule.thresholds.values()
    assert isinstance(t, KernelThreshold)
    assert (t.occupancy, t.registers_per_thread, t.threads_per_block) == (2, 183, 128)
    doc = t.to_json()
    assert list(doc)[:6] == ["kernel", "backend", "kv_heads", "occupancy", "max_grid", "b_threshold"]
    assert (doc["max_grid"], doc["b_threshold"]) == (264, 66)


def test_ncu_measurements_attach_to_their_launches() -> None:
    a = sweep(True)
    by_kernel = {st.launches[0].attention.kernel_id: st.name for st in a.steps}
    measured = {by_kernel[k]: m for k, m in a.schedule.measured.items() if k in by_kernel}
    # ncu profiled step 0 of CUDA-core uniform and skew80 at B = 32, 128, 256.
    assert set(measured) == {f"decode tc=0 dist={d} bs={b} step=0"
                             for d in ("uniform", "skew80") for b in (32, 128, 256)}
    m = measured["decode tc=0 dist=skew80 bs=256 step=0"]
    assert (m.sm_active_avg, m.sm_active_max) == (797242.58, 1020054.0)
    assert abs(m.sm_idle - 0.2184) < 1e-3
    k = next(k for k, n in by_kernel.items() if n == "decode tc=0 dist=skew80 bs=256 step=0")
    assert abs(a.schedule.models[k].sm_idle - m.sm_idle) < 0.05  # the simulation agrees within 0.05
    assert a.schedule.measured[k].to_json()["sm_active_max"] == 1020054.0


def test_idle_gaps_lie_between_steps() -> None:
    a = sweep(False)
    gaps = a.schedule.idle_gaps
    assert gaps
    spans = sorted((st.start_ns, st.end_ns) for st in a.steps)
    for g in gaps[:200]:
        assert g.dur_ns >= 1_000
        assert not any(s < g.end_ns and g.start_ns < e for s, e in spans)  # inside no step
        nxt = a.steps[g.before_step]
        assert nxt.start_ns >= g.end_ns


def test_launch_models_as_columns_read_as_the_dict_of_their_pairs() -> None:
    """`LaunchModels` (ids, a code per launch, the distinct models) reads as the dict made from its pairs: ids out
    of order, a repeated id (first place, last model), ids it lacks; `of` looks many up at once."""
    import numpy as np

    from traceinsight.model.schedule import LaunchModels

    kinds = [object(), object(), object()]
    ids = [40, 7, 99, 7, 12]
    codes = [0, 1, 2, 0, 1]
    got = LaunchModels(np.array(ids, np.int64), np.array(codes, np.int32), kinds)  # type: ignore[arg-type]
    want = dict(zip(ids, (kinds[c] for c in codes), strict=True))
    assert list(got) == list(want) and len(got) == len(want)
    assert list(got.values()) == list(want.values()) and dict(got.items()) == want
    assert all(got[k] is v for k, v in want.items())
    assert got.get(8) is None and 8 not in got and 7 in got and got.get(np.int64(99)) is kinds[2]
    asked = np.array([12, 8, 40, 7, 1000, -1], np.int64)
    assert got.of(asked) == [want.get(k) for k in asked.tolist()]
    ordered = LaunchModels(np.array([1, 2, 3], np.int64), np.array([2, 2, 0], np.int32), kinds)  # type: ignore[arg-type]
    assert ordered.of(np.array([3, 4, 0], np.int64)) == [kinds[0], None, None] and ordered[2] is kinds[2]
    assert LaunchModels(np.zeros(0, np.int64), np.zeros(0, np.int32), []).of(asked) == [None] * len(asked)
