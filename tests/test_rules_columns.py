"""The rules' column reads against the object reads they replace, on real analyses: slow_launches.sql's result as
columns (`slowdown.slow_columns`) row for row as `slow_rows`; the launch relation's columns by pos as the views;
backend counts from the relation's codes as from the views; the root-cause budgets from the step arrays as from
the Step objects; and consolidation's findings, whose many step indexes become the steps' own int objects, equal
to those it makes without the arrays."""

from __future__ import annotations

import pytest
from golden import analyze_golden

from traceinsight.diagnose import launch_table, rootcause, slowdown, views
from traceinsight.diagnose.finding import Finding, Severity


@pytest.mark.parametrize("case", ["h200_nsys", "h200_sweep"])
def test_slow_launches_as_columns_read_as_the_rows(case: str) -> None:
    _, a = analyze_golden(case)
    try:
        rows = list(slowdown.slow_rows(a, None, None, 0.0, 0.0))  # loose: every launch is selected
        cols = slowdown.slow_columns(a, None, None, 0.0, 0.0)
        assert len(rows) > 10
        assert cols.pos.tolist() == [pos for _, pos, _ in rows]
        assert cols.name_id.tolist() == [name_id for name_id, _, _ in rows]
        assert cols.excess_ns.tolist() == [hit.excess_ns for _, _, hit in rows]
        assert [cols.references[c] for c in cols.reference.tolist()] == [hit.reference for _, _, hit in rows]
        none = slowdown.slow_columns(a, None, None, 1e9, 0.0)
        assert len(none.pos) == 0 and none.references == []
        _, launched = launch_table.launch_db(a)
        assert launch_table.launch_column(a, "step").tolist() == [v.step.index for v in launched]
        assert launch_table.launch_column(a, "dur_ns").tolist() == [v.dur_ns for v in launched]
        with pytest.raises(ValueError, match="NULL"):
            launch_table.launch_column(a, "b_threshold" if case == "h200_nsys" else "sm_idle_measured")
        assert launch_table.backend_counts(a) == views.backend_counts(a)
    finally:
        launch_table.release(a)
    assert launch_table.backend_counts(a) == views.backend_counts(a)  # without the relation: from the views


def test_budgets_and_consolidation_from_the_step_arrays() -> None:
    _, a = analyze_golden("h200_sweep")
    arrays = a.step_arrays()
    assert rootcause.budgets(a.steps, arrays) == rootcause.budgets(a.steps)
    steps = tuple(s.index for s in a.steps)
    assert len(steps) >= rootcause._SHARED_FROM  # a finding naming them is given the steps' own ints
    wide = Finding(id="gpu-idle-gaps", severity=Severity.INFO, steps=tuple(int(str(i)) for i in steps),
                   summary="every step", saving_ns=len(steps), step_saving_ns={int(str(i)): 1 for i in steps})
    findings = [*a.findings, wide]
    plain = rootcause.consolidate(findings, a.steps)
    shared = rootcause.consolidate(findings, a.steps, arrays)
    assert [f.to_json() for f in shared] == [f.to_json() for f in plain]
    assert [dict(f.step_saving_ns) for f in shared] == [dict(f.step_saving_ns) for f in plain]
    (got,) = [f for f in shared if f.summary == "every step"]
    big = [i for i, s in enumerate(steps) if s > 256]  # (small ints are one object anyway)
    assert big and all(got.steps[i] is steps[i] for i in big)
    keys = list(got.step_saving_ns)
    assert all(keys[i] is steps[i] for i in big)


@pytest.mark.parametrize("case", ["h200_sweep", "h200_sweep_trace_only", "fa3_variants_q32kv4d128_fa3_torch"])
def test_threshold_proximity_applies_as_the_views_say(case: str) -> None:
    """Whether a split launch of the rule's backends has a batch size and a threshold: from the relation's columns
    as from the views (both outcomes occur among the cases)."""
    from traceinsight.diagnose.rules import threshold_proximity as tp

    _, a = analyze_golden(case)
    try:
        want = any(v.batch_size is not None and v.launch.split_kv is True and v.backend in tp.BACKENDS
                   and v.threshold is not None and v.threshold.b_threshold for v in views.launch_views(a))
        assert tp._split_launches_with_batch_sizes(a) is want
        assert want is (case != "h200_sweep_trace_only")
    finally:
        launch_table.release(a)


def test_the_launches_are_let_go_after_their_last_reader() -> None:
    """The rules outside registry.LAUNCH_READERS build neither the launch relation nor the launch views (the runner
    lets both go before them), and the rules' findings are the same either way."""
    from traceinsight.diagnose import registry

    _, a = analyze_golden("h200_sweep")
    held = [f.to_json() for f in registry.run_rules(a)[0]]
    assert held and "launch-table" not in a.cache and a.schedule is not None
    assert not any(k[0] == "launch_views" for k in a.schedule.cache if isinstance(k, tuple))
    others = [r for r in registry.RULES if r.ID not in registry.LAUNCH_READERS]
    assert others and len(others) < len(registry.RULES)
    for r in others:
        registry.run_rules(a, (r,))
        assert "launch-table" not in a.cache, r.ID
        assert not any(k[0] == "launch_views" for k in a.schedule.cache if isinstance(k, tuple)), r.ID
    findings, _ = registry.run_rules(a)
    assert [f.to_json() for f in findings] == held
