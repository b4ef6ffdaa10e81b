"""`attribution._component_matrix` (the steps' breakdown components, names and ns, as one matrix filled in one
scatter) against the loop over each step's dict that it replaced, on the real sweep trace's steps and on edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TRACES

from traceinsight.diagnose.attribution import _component_matrix
from traceinsight.pipeline import analyze


def _loop(comps: list[dict[str, int]]) -> tuple[np.ndarray, list[str]]:
    names = sorted({c for cs in comps for c in cs})
    col = {c: j for j, c in enumerate(names)}
    values = np.zeros((len(comps), len(names)))
    for i, cs in enumerate(comps):
        for c, v in cs.items():
            values[i, col[c]] = v
    return values, names


@pytest.mark.parametrize("comps", [
    [], [{}], [{}, {}], [{"b": 3, "a": 1}, {}, {"a": 7}], [{"x": 2**53 + 1, "y": -5}], [{"z": 0}, {"a": 1.5}],
])
def test_edge_cases_match_the_loop(comps: list[dict[str, int]]) -> None:
    got, want = _component_matrix([(tuple(d), tuple(d.values())) for d in comps]), _loop(comps)
    assert got[1] == want[1] and got[0].shape == want[0].shape and np.array_equal(got[0], want[0])


def test_the_sweep_traces_steps_match_the_loop() -> None:
    db, (a,) = analyze([TRACES / "h200/flashinfer_decode_sweep.pt.trace.json.gz"], cache=False)
    comps = [s.breakdown.components if s.breakdown else {} for s in a.steps]
    assert sum(map(len, comps)) > 100  # real steps with their components
    pairs = [(b.component_names, b.component_ns()) if (b := s.breakdown) else ((), ()) for s in a.steps]
    got, want = _component_matrix(pairs), _loop(comps)
    assert got[1] == want[1] and np.array_equal(got[0], want[0])
    db.close()
