"""`step_breakdown.components_ns` (every breakdown's components' ns at once, gathered from the array the breakdowns of
a trace share) against each breakdown's own `component_ns`, on a real trace and on breakdowns holding their own; the
host gaps kept in that array read back by each breakdown and by `StepArrays`; a breakdown pickled by its values."""

from __future__ import annotations

import pickle

import numpy as np
from conftest import TRACES

from traceinsight.model.step_arrays import step_arrays
from traceinsight.model.step_breakdown import StepBreakdown, components_ns
from traceinsight.pipeline import analyze


def _each(bs: list[StepBreakdown]) -> list[int]:
    return [v for b in bs for v in b.component_ns()]


def test_a_real_traces_breakdowns() -> None:
    db, (a,) = analyze([TRACES / "h200/flashinfer_decode_sweep.pt.trace.json.gz"], cache=False)
    bs = [s.breakdown for s in a.steps if s.breakdown is not None]
    assert len(bs) > 10 and len({id(b._data) for b in bs}) == 1  # one shared array: the gathered path
    got = components_ns(bs)
    assert got.dtype == np.int64 and got.tolist() == _each(bs)
    assert components_ns(bs[::-1]).tolist() == _each(bs[::-1])  # any order, as given
    db.close()


def test_breakdowns_with_their_own_arrays_and_none() -> None:
    bs = [StepBreakdown(0, 10, "gpu-span", {"attention": 7, "idle": 3}), StepBreakdown(5, 5, "gpu-span", {}),
          StepBreakdown(1, 2**40, "cpu-range", {"idle": 2**40 - 1}, host_range_ns=4)]
    assert components_ns(bs).tolist() == [7, 3, 2**40 - 1] == _each(bs)
    assert components_ns([]).tolist() == []


def test_host_gaps_in_the_shared_array_read_back() -> None:
    db, (a,) = analyze([TRACES / "h200/flashinfer_decode_sweep.pt.trace.json.gz"], cache=False)
    bs = [s.breakdown for s in a.steps if s.breakdown is not None]
    gaps = [b.host_gaps for b in bs]
    assert any(gaps) and all(isinstance(g, tuple) and all(len(p) == 2 and p[0] < p[1] for p in g) for g in gaps)
    assert step_arrays(a.steps).host_gaps == tuple(gaps)  # gathered from the array: the same as each one's
    twins = [StepBreakdown(b.start_ns, b.end_ns, b.source, b.components, b.host_range_ns, b.host_gap_max_ns,
                           b.host_long_ns, b.idle_stretches, b.host_gaps) for b in bs]
    assert twins == bs and [t.host_gaps for t in twins] == gaps  # built one by one, each with its own array
    db.close()


def test_a_breakdown_pickles_by_its_values() -> None:
    b = StepBreakdown(1, 2**40, "cpu-range", {"attention": 5, "idle-host": 2**40 - 6}, host_range_ns=4,
                      host_gap_max_ns=9, host_long_ns=9, idle_stretches=2, host_gaps=((10, 19), (30, 31)))
    got = pickle.loads(pickle.dumps(b))
    assert got == b and got.source == "cpu-range" and got.host_gaps == ((10, 19), (30, 31))
    assert repr(got) == repr(b)
