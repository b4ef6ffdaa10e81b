"""`step_breakdown.components_ns` (every breakdown's components' ns at once, gathered from the array the breakdowns of
a trace share) against each breakdown's own `component_ns`, on a real trace and on breakdowns holding their own."""

from __future__ import annotations

import numpy as np
from conftest import TRACES

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
