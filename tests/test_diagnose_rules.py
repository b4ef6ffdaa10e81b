"""The diagnostics framework: the catalogue, Finding, ordering, --fail-on exit codes, not-applicable paths,
threshold overrides. Real analyses (cached in test_diagnose_common); the foreign AlexNet trace has no attention
kernel at all (checked with zcat: no flashinfer/flash/attention kernel names)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
from test_diagnose_common import fa2, findings, sweep

from traceinsight.diagnose import EXIT_FINDINGS, Finding, Severity, fail_exit_code, sort_findings
from traceinsight.diagnose.registry import RULE_IDS, RULES, rule, run_rules
from traceinsight.diagnose.rule import Input
from traceinsight.errors import TraceInsightError
from traceinsight.pipeline import analyze

FIXED_IDS = ["decode-on-prefill-kernel", "split-kv-off", "split-kv-starved", "tail-ctas", "sm-idle", "latency-spike",
             "threshold-proximity", "wave-quantization", "slow-path", "kv-bandwidth", "gpu-idle-gaps", "codesign",
             "slow-steps"]


def test_catalogue_declares_every_rule() -> None:
    assert sorted(RULE_IDS) == sorted(FIXED_IDS)
    # latency-spike links spikes to the findings of all the others; slow-steps reads its step attribution
    assert RULE_IDS[-2:] == ("latency-spike", "slow-steps")
    for r in RULES:
        assert r.__doc__ and r.NAME and r.DESCRIPTION and r.PASSED and callable(r.apply)
        assert all(isinstance(n, Input) for n in r.NEEDS + r.OPTIONAL)
        assert rule(r.ID) is r
        # Thresholds are named constants with a unit or a dimensionless role in the name.
        for name in (n for n in dir(r) if n.isupper() and isinstance(getattr(r, n), int | float)):
            assert any(t in name for t in ("_NS", "RATIO", "FRACTION", "REQUESTS", "STEPS", "MAX", "MIN",
                                           "TARGET", "LAUNCHES", "BYTES")), (r.ID, name)


def test_finding_normalizes_and_serializes() -> None:
    f = Finding(id="x", severity="warning", steps=(5, 3, 3), summary="s", evidence={"dur_ns": 1, "t": (1, 2)},
                explanation="e", remedy="r", saving_ns=-4.2)
    assert f.severity is Severity.WARNING and f.steps == (3, 5) and f.saving_ns == 0
    assert f.to_json() == {"id": "x", "severity": "warning", "steps": [3, 5], "summary": "s",
                           "evidence": {"dur_ns": 1, "t": [1, 2]}, "remedy": "r", "saving_ns": 0, "explanation": "e",
                           # Root-cause links (diagnose/rootcause.py), unset until the registry links findings.
                           "ref": None, "supports": None, "related": [], "attributed_saving_ns": None,
                           "saving_basis": None, "saving_in_steps_ns": None, "saving_between_steps_ns": None}
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.id = "y"  # type: ignore[misc]


def test_sort_by_severity_then_saving() -> None:
    fs = [Finding("a", "info", (1,), "", saving_ns=9), Finding("b", "critical", (1,), "", saving_ns=1),
          Finding("c", "critical", (2,), "", saving_ns=None), Finding("d", "critical", (3,), "", saving_ns=7),
          Finding("e", "warning", (1,), "")]
    assert [f.id for f in sort_findings(fs)] == ["d", "b", "c", "e", "a"]


def test_fail_exit_code_from_real_findings() -> None:
    a = sweep(False)
    severities = {f.severity for f in a.findings}
    assert Severity.CRITICAL in severities  # split-kv-off
    assert fail_exit_code(a.findings, None) == 0
    assert fail_exit_code(a.findings, "critical") == EXIT_FINDINGS == 3
    assert fail_exit_code([f.to_json() for f in a.findings], "WARNING") == 3
    infos = [f for f in a.findings if f.severity is Severity.INFO]
    assert infos and fail_exit_code(infos, "warning") == 0 and fail_exit_code(infos, "info") == 3
    assert fail_exit_code([], "info") == 0
    with pytest.raises(TraceInsightError, match="--fail-on: unknown severity 'severe'"):
        fail_exit_code(a.findings, "severe")


def _status(a) -> dict[str, tuple[str, str]]:
    return {c.id: (c.status, c.reason) for c in a.checks}


def test_not_applicable_without_attention_kernels() -> None:
    foreign = Path(__file__).resolve().parents[1].parent / "shared/traces/foreign"
    trace = foreign / "hta_a100_alexnet_critical_path_trace.json.gz"
    _, [a] = analyze([trace])
    assert a.steps == [] and a.findings == []
    st = _status(a)
    assert all(s == "not-applicable" for s, _ in st.values())
    assert st["split-kv-off"][1] == "no attention kernel launches were found in the trace"
    assert "sidecar" in st["codesign"][1]


def test_not_applicable_without_sidecar() -> None:
    st = _status(sweep(False))
    assert st["sm-idle"] == ("not-applicable", "needs Nsight Compute metrics (--ncu CSV) or a simulated schedule "
                                               "(--meta SIDECAR)")
    assert st["wave-quantization"][0] == st["kv-bandwidth"][0] == st["codesign"][0] == "not-applicable"
    assert "--meta SIDECAR" in st["kv-bandwidth"][1]
    # FA2 sweep without meta: every split launch's B is unknown (only split-off grids give B).
    assert _status(fa2(False))["threshold-proximity"] == (
        "not-applicable", "the batch size of split launches is unknown without a sidecar (--meta SIDECAR)")
    # The same rules run with the sidecar.
    st = _status(sweep(True))
    # The sweep's tails idle the SMs and its long launches move KV below the bandwidth: both fire (README sample).
    assert {i: st[i][0] for i in ("sm-idle", "kv-bandwidth", "codesign", "wave-quantization")} == {
        "sm-idle": "fired", "kv-bandwidth": "fired", "codesign": "passed", "wave-quantization": "passed"}
    assert st["codesign"] == ("passed", rule("codesign").PASSED)


def test_gpu_idle_gaps_needs_the_schedule() -> None:
    a = copy.copy(sweep(False))
    a.schedule = None
    _, results = run_rules(a, (rule("gpu-idle-gaps"), rule("sm-idle")))
    assert [(r.id, r.status, r.reason) for r in results] == [
        ("gpu-idle-gaps", "not-applicable", "the schedule model did not run"),
        ("sm-idle", "not-applicable", "needs Nsight Compute metrics (--ncu CSV) or a simulated schedule "
                                      "(--meta SIDECAR)")]


def test_limits_override_a_rule_threshold() -> None:
    a = copy.copy(fa2(False))
    a.limits = {"split-kv-off.SLOWDOWN_MIN_RATIO": 1000.0}
    found, results = run_rules(a, (rule("split-kv-off"),))
    assert found == [] and results[0].status == "passed"
    a.limits = {}
    found, _ = run_rules(a, (rule("split-kv-off"),))
    assert len(found) == 1


def test_codesign_rule_reports_a_bad_shape() -> None:
    a = copy.copy(sweep(True))
    a.schedule = copy.copy(a.schedule)
    # The sweep's shape (32 / 4 heads, head_dim 128) passes; give its steps a 96-wide head and 16 KV heads.
    a.schedule.batches = {i: dataclasses.replace(b, head_dim=96, kv_heads=16) for i, b in a.schedule.batches.items()}
    found, results = run_rules(a, (rule("codesign"),))
    assert results[0].status == "fired"
    checks = {f.evidence["check"]: f for f in found}
    assert set(checks) == {"head-dim-multiple-of-128", "group-size"}
    assert checks["head-dim-multiple-of-128"].severity is Severity.WARNING
    assert checks["head-dim-multiple-of-128"].evidence["padded_head_dim"] == 128
    assert checks["group-size"].severity is Severity.INFO and checks["group-size"].evidence["local_group_size"] == 2
    assert len(checks["group-size"].steps) == 390


def test_every_finding_explains_itself() -> None:
    for a in (sweep(True), sweep(False), fa2(True)):
        for f in a.findings:
            assert f.summary and f.explanation and f.remedy and f.steps
            assert all(k == k.lower() for k in f.evidence)
    assert findings(sweep(True), "gpu-idle-gaps")[0].evidence["pauses"] == 0


def test_rules_declare_the_rules_they_read_and_read_nothing_else() -> None:
    """READS names rules that run earlier; while a rule runs it sees only their findings."""
    from traceinsight.diagnose.registry import RULES

    order = [r.ID for r in RULES]
    for i, r in enumerate(RULES):
        for dep in getattr(r, "READS", ()):
            assert dep in order[:i], (r.ID, dep)
    import ast
    import inspect

    for r in RULES:
        if "ctx.findings" in inspect.getsource(r) or "attributions(ctx)" in inspect.getsource(r):
            assert getattr(r, "READS", ()), f"{r.ID} reads other rules' findings without declaring READS"
    # Nor through a helper: the diagnose modules the rules call read no findings (a rule's READS is its own).
    helpers = {m for r in RULES for v in vars(r).values() if (m := inspect.getmodule(v)) is not None
               and m.__name__.startswith("traceinsight.diagnose.") and not m.__name__.startswith(
                   "traceinsight.diagnose.rules")}
    assert {m.__name__ for m in helpers} >= {"traceinsight.diagnose.attribution", "traceinsight.diagnose.launch_table"}
    for m in helpers:
        reads = [n.lineno for n in ast.walk(ast.parse(inspect.getsource(m)))
                 if isinstance(n, ast.Attribute) and n.attr == "findings" and isinstance(n.ctx, ast.Load)
                 and not (isinstance(n.value, ast.Name) and n.value.id == "self")]  # RuleResult's count
        assert not reads, (m.__name__, reads)


def test_step_ranges_and_steps_by_index_hold_no_object_per_step() -> None:
    import numpy as np

    from traceinsight.diagnose.context import TraceAnalysis, _Numbered
    from traceinsight.diagnose.host import _Ranges
    from traceinsight.model.steps import Step

    ranges = _Ranges(np.array([5, 1, 5, 1], np.int64), np.array([9, 4, 7, 4], np.int64))
    assert (1, 4) in ranges and (5, 7) in ranges and (5, 9) in ranges
    assert (5, 8) not in ranges and (2, 4) not in ranges and (None, None) not in ranges and 3 not in ranges
    assert (1, 4) not in _Ranges(np.zeros(0, np.int64), np.zeros(0, np.int64))

    steps = [Step(index=i, name=f"s{i}", source="launch", range_id=None, start_ns=i, end_ns=i + 1, kernel_count=1,
                  launches=[]) for i in range(3)]
    a = TraceAnalysis(trace_id=1, path="x", format="nsys", format_version=None, tool_version=None, gpu={},
                      start_ns=0, end_ns=3, warnings=[], kernels=[], families=[], steps=steps)
    by = a.steps_by_index()
    assert isinstance(by, _Numbered) and by[2] is steps[2] and by.get(3) is None and 1 in by and -1 not in by
    assert list(by) == [0, 1, 2] and len(by) == 3
    a.steps = [steps[2], steps[0]]  # not numbered by position: a dict
    assert dict(a.steps_by_index()) == {2: steps[2], 0: steps[0]}
