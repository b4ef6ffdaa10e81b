"""`model.step_arrays` (the steps as per-step arrays, what the rules read): its component matrix (the breakdowns'
components gathered in one scatter) against the loop over each step's dict, on the real sweep trace's steps, on
subsets of rows and on edge cases; and its per-step columns against the Step objects' own properties."""

from __future__ import annotations

from array import array

import numpy as np
import pytest
from conftest import TRACES

from traceinsight.model.phases import PREFILL_PHASES
from traceinsight.model.step_arrays import step_arrays
from traceinsight.model.step_breakdown import StepBreakdown
from traceinsight.model.steps import Step
from traceinsight.pipeline import analyze


def _loop(comps: list[dict[str, int] | None]) -> tuple[np.ndarray, list[str]]:
    names = sorted({c for cs in comps if cs is not None for c in cs})
    col = {c: j for j, c in enumerate(names)}
    values = np.zeros((len(comps), len(names)))
    for i, cs in enumerate(comps):
        for c, v in (cs or {}).items():
            values[i, col[c]] = v
    return values, names


def _steps(comps: list[dict[str, int] | None]) -> list[Step]:
    arena: array[int] = array("q")
    return [Step(i, f"s{i}", "launch", None, 10 * i, 10 * i + 5, 0, [],
                 breakdown=None if c is None else StepBreakdown(10 * i, 10 * i + 7, "gpu-span", c, arena=arena))
            for i, c in enumerate(comps)]


@pytest.mark.parametrize("comps", [
    [], [{}], [{}, {}], [{"b": 3, "a": 1}, None, {"a": 7}], [{"x": 2**52 + 1, "y": -5}], [None, {"z": 0}, None],
])
def test_edge_cases_match_the_loop(comps: list[dict[str, int] | None]) -> None:
    a = step_arrays(_steps(comps))
    got, want = a.component_matrix(), _loop(comps)
    assert got[1] == want[1] and got[0].shape == want[0].shape and np.array_equal(got[0], want[0])
    for rows in ([], [0][:len(comps)], list(range(len(comps)))[::-1], list(range(len(comps)))[1::2]):
        got = a.component_matrix(np.array(rows, np.int64))
        want = _loop([comps[r] for r in rows])
        assert got[1] == want[1] and np.array_equal(got[0], want[0])
    assert a.wall.tolist() == [7 if c is not None else 5 for c in comps]


def test_the_sweep_traces_steps_match_their_objects() -> None:
    db, (a,) = analyze([TRACES / "h200/flashinfer_decode_sweep.pt.trace.json.gz"], cache=False)
    steps = a.steps
    comps = [s.breakdown.components if s.breakdown else None for s in steps]
    assert sum(map(len, filter(None, comps))) > 100  # real steps with their components
    arrays = step_arrays(steps)
    got, want = arrays.component_matrix(), _loop(comps)
    assert got[1] == want[1] and np.array_equal(got[0], want[0])
    rows = np.arange(len(steps))[::3]
    got, want = arrays.component_matrix(rows), _loop([comps[r] for r in rows.tolist()])
    assert got[1] == want[1] and np.array_equal(got[0], want[0])
    assert arrays.wall.tolist() == [s.wall_ns for s in steps]
    assert arrays.host_long.tolist() == [s.breakdown.host_long_ns if s.breakdown else 0 for s in steps]
    cpu = [(s.range_start_ns, s.range_end_ns) for s in steps
           if s.range_side == "cpu" and s.range_start_ns is not None and s.range_end_ns is not None]
    assert list(zip(arrays.cpu_range_start.tolist(), arrays.cpu_range_end.tolist(), strict=True)) == cpu
    assert arrays.prefill.tolist() == [any(x.phase in PREFILL_PHASES for x in s.launches) for s in steps]
    signature = [tuple(sorted({x.attention.name for x in s.launches if x.phase not in PREFILL_PHASES}))
                 for s in steps]
    assert [arrays.signatures[c] if c >= 0 else () for c in arrays.signature.tolist()] == signature
    db.close()
