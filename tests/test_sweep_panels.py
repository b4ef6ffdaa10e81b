"""The batch-size sweep's panels: computed once with the analysis (`model.sweep.sweep_panels`, kept in the
`analyses` table and the document's `sweep`), drawn by the reports as the document holds them, and recomputed by
the same function from the steps of an analysis saved before the table kept them."""

from __future__ import annotations

import orjson
from test_diagnose_common import sweep

from traceinsight.model.sweep import SweepPanel, sweep_panels
from traceinsight.report import saved, sweep_view
from traceinsight.report.json_doc import STEPS_ALL, STEPS_SELECTED

FA = ("BatchDecodeWithPagedKVCacheKernel", "flashinfer-cuda-core")
THRESHOLDS = [{"kernel": "Other", "backend": FA[1], "kv_heads": 8, "b_threshold": 99},
              {"kernel": FA[0], "backend": FA[1], "kv_heads": 4, "b_threshold": 297}]


def _step(name: str, att: int, split: bool | None) -> tuple[str, int, list[tuple[str | None, str | None,
                                                                               bool | None]]]:
    return name, att, [(FA[0], FA[1], split)]


def test_panels_group_cases_by_their_other_tokens() -> None:
    steps = [_step("decode tc=0 dist=skew80 bs=64 step=0", 300, True),
             _step("decode tc=0 dist=skew80 bs=64 step=1", 100, True),
             _step("decode tc=0 dist=skew80 bs=64 step=2", 200, False),  # one launch off: the case is not off
             _step("decode tc=0 dist=uniform bs=512 step=0", 900, False),
             _step("decode tc=0 dist=skew80 bs=512 step=0", 800, False),
             _step("decode tc=1 dist=uniform bs=8", 50, True),  # one case alone: not a sweep
             _step("prefill bs=64", 5, None)]  # no distribution
    (panel,) = sweep_panels(steps, THRESHOLDS)
    assert (panel.key, panel.kernel, panel.backend) == ("tc=0", *FA)
    assert [s.dist for s in panel.series] == ["uniform", "skew80"]  # uniform first
    skew = panel.series[1]
    assert (skew.batch, skew.median_ns, skew.split_off) == ([64, 512], [200, 800], [False, True])
    assert panel.b_threshold == 297 and panel.threshold_text == f"B_th = 297 ({FA[0]} ({FA[1]}, H_kv=4))"
    assert panel.batch_sizes == [64, 512]
    assert sweep_panels([_step("decode step=3", 1, None)], THRESHOLDS) == []


def test_the_document_holds_the_panels_and_the_reports_read_them_as_held() -> None:
    a = sweep(True)
    src = saved.in_memory([a])
    doc = saved.document(src, a.trace_id, STEPS_SELECTED)  # a few steps only: the panels still cover every one
    panels = sweep_view.sweep(doc)
    assert [p.key for p in panels] == ["tc=0", "tc=1"]
    assert sum(len(s.batch) for p in panels for s in p.series) > len(doc["steps"])
    assert panels[0].b_threshold == 297
    assert [p.to_json() for p in panels] == orjson.loads(orjson.dumps(doc["sweep"]))
    renamed = {**doc, "steps": [{**s, "name": "step"} for s in doc["steps"]]}
    assert sweep_view.sweep(renamed) == panels  # drawn as held, not parsed from the step names again
    assert sweep_view.sweep({**doc, "sweep": []}) == []
    assert SweepPanel.from_json(panels[1].to_json()) == panels[1]


def test_an_analysis_saved_without_its_panels_gets_them_from_its_steps() -> None:
    a = sweep(True)
    src = saved.in_memory([a])
    want = saved.document(src, a.trace_id, STEPS_ALL)["sweep"]
    src.con.execute("UPDATE analyses SET sweep_json = NULL")
    assert want and saved.document(src, a.trace_id, STEPS_SELECTED)["sweep"] == want


def test_panels_from_the_steps_as_columns_are_the_panels_of_the_steps() -> None:
    """`report.sweep_columns` (the analysis tables' panels, from the steps as columns) gives what `sweep_panels` of
    the steps gives: on the sweep trace as it is, and with its cases spread over several names (`step=` tokens
    that only repeat a case), one launch of a case off and the other on, and a case's medians of an even count."""
    import copy

    from traceinsight.report.step_columns import step_columns
    from traceinsight.report.sweep_columns import sweep_panels_of

    steps = copy.deepcopy(sweep(False).steps)  # (shared with other tests: changed below)

    def of_steps() -> list[SweepPanel]:
        return sweep_panels(((s.name, s.attention_ns, [(x.attention.kernel, x.attention.backend, x.split_kv)
                                                      for x in s.launches]) for s in steps), THRESHOLDS)

    want = of_steps()
    assert want and sweep_panels_of(step_columns(steps), THRESHOLDS) == want
    for i, s in enumerate(steps):
        s.name = f"{s.name} step={i % 3}"
        if i % 5 == 0:
            for x in s.launches:
                x.split_kv = not x.split_kv if x.split_kv is not None else None
    steps = steps[1:]  # an even count somewhere
    changed = of_steps()
    assert changed != want and sweep_panels_of(step_columns(steps), THRESHOLDS) == changed
