"""The rules' column reads against the object reads they replace, on real analyses: slow_launches.sql's result as
columns (`slowdown.slow_columns`) row for row as `slow_rows`; the launch relation's columns by pos as the views;
backend counts from the relation's codes as from the views; the root-cause budgets from the step arrays as from
the Step objects; and consolidation's findings, whose many step indexes become the steps' own int objects, equal
to those it makes without the arrays."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from types import ModuleType

import pytest
from golden import analyze_golden

from traceinsight.diagnose import attribution, finding, host, launch_table, rootcause, slowdown, views
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.model.int_keys import IntMap, SortedInts


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
    assert len(steps) >= finding._MANY  # a finding naming them holds them as arrays
    wide = Finding(id="gpu-idle-gaps", severity=Severity.INFO, steps=steps[::-1] + steps[:3],
                   summary="every step", saving_ns=len(steps), step_saving_ns={i: 1.4 for i in steps})
    assert isinstance(wide.steps, SortedInts) and wide.steps == steps
    assert isinstance(wide.step_saving_ns, IntMap) and wide.step_saving_ns == dict.fromkeys(steps, 1)
    findings = [*a.findings, wide]
    plain = rootcause.consolidate(findings, a.steps)
    shared = rootcause.consolidate(findings, a.steps, arrays)
    assert [f.to_json() for f in shared] == [f.to_json() for f in plain]
    assert [dict(f.step_saving_ns) for f in shared] == [dict(f.step_saving_ns) for f in plain]
    (got,) = [f for f in shared if f.summary == "every step"]
    assert got.steps is wide.steps and got.step_saving_ns is wide.step_saving_ns  # shared, not copied
    assert got == replace(wide, ref=got.ref, supports=got.supports, related=got.related,
                          attributed_ns=got.attributed_ns, saving_basis=got.saving_basis)


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
    """The rules that do not declare the launches in their USES build neither the launch relation nor the launch
    views (the runner lets both go before them), and the rules' findings are the same either way."""
    from traceinsight.diagnose import registry

    _, a = analyze_golden("h200_sweep")
    held = [f.to_json() for f in registry.run_rules(a)[0]]
    assert held and "launch-table" not in a.cache and a.schedule is not None
    assert not any(k[0] == "launch_views" for k in a.schedule.cache if isinstance(k, tuple))
    others = [r for r in registry.RULES if views.LAUNCHES not in getattr(r, "USES", ())]
    assert others and len(others) < len(registry.RULES)
    for r in others:
        registry.run_rules(a, (r,))
        assert "launch-table" not in a.cache, r.ID
        assert not any(k[0] == "launch_views" for k in a.schedule.cache if isinstance(k, tuple)), r.ID
    findings, _ = registry.run_rules(a)
    assert [f.to_json() for f in findings] == held


def _held(a: TraceAnalysis) -> set[str]:
    """The products (registry.PRODUCTS) the analysis holds now."""
    assert a.schedule is not None
    held = {views.LAUNCHES: "launch-table" in a.cache or any(k[0] == "launch_views" for k in a.schedule.cache
                                                             if isinstance(k, tuple)),
            attribution.ATTRIBUTION: "attribution" in a.cache, host.HOST_RANGES: "host.cpu-step-ranges" in a.cache}
    return {name for name, yes in held.items() if yes}


def _probe(name: str, seen: dict[str, set[str]], make: Callable[[TraceAnalysis], object] | None = None,
           reads: tuple[str, ...] = ()) -> ModuleType:
    """A rule that finds nothing and records the products held while it runs, after making one (`make`, a reader
    that does not declare it in USES)."""
    m = ModuleType(name)
    m.ID = m.NAME = name
    m.DESCRIPTION = m.PASSED = ""
    m.NEEDS = m.OPTIONAL = ()
    m.READS = reads

    def apply(ctx: TraceAnalysis) -> list[Finding]:
        if make is not None:
            seen[f"{name} made"] = {repr(make(ctx))}
        seen[name] = _held(ctx)
        return []

    m.apply = apply
    return m


def test_each_product_is_let_go_after_its_last_user_and_made_again_when_asked() -> None:
    """registry.PRODUCTS: while the rules run, each product is held from its first maker until its last user (the
    launches from decode-on-prefill-kernel to kv-bandwidth, the steps' host ranges latency-spike's alone, the
    attribution table latency-spike's and slow-steps'), let go after it, and made again by a reader that does not
    declare it (then let go after that reader); none is held when the rules are done. The findings are those of
    the rules alone."""
    from traceinsight.diagnose import registry
    from traceinsight.diagnose.rules import latency_spike, slow_steps

    _, a = analyze_golden("h200_sweep")
    want = [f.to_json() for f in registry.run_rules(a)[0]]
    assert not _held(a)
    seen: dict[str, set[str]] = {}
    rules = list(registry.RULES)
    rules.insert(1, _probe("after-the-first", seen))
    rules.insert(rules.index(slow_steps), _probe("between", seen, make=host._cpu_step_ranges))
    rules.insert(rules.index(slow_steps) + 1, _probe("next", seen))
    rules.append(_probe("last", seen, make=lambda c: len(latency_spike.attributions(c)), reads=latency_spike.READS))
    findings, checks = registry.run_rules(a, tuple(rules))
    assert [f.to_json() for f in findings] == want
    assert seen["after-the-first"] == {views.LAUNCHES}
    assert seen["between"] == {attribution.ATTRIBUTION, host.HOST_RANGES}  # the ranges made again by the probe
    assert seen["next"] == set()  # after slow-steps: its ranges and the table let go
    assert seen["last"] == {attribution.ATTRIBUTION} and seen["last made"] == {repr(len(a.steps))}
    assert not _held(a)
    assert {c.id for c in checks} >= {"between", "last"}
