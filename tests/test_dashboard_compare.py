"""The dashboard's A/B view (dashboards/compare_view.py) under Streamlit's test harness: the loop's CUDA-graph
capture (before) against its eager capture (after) — the decode steps regress by about 1 ms per step, the GPU
waiting for the host (tests/test_gate.py holds the same through the CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the dashboard extra (streamlit) is not installed")

from streamlit.testing.v1 import AppTest  # noqa: E402

APP = Path(__file__).resolve().parents[1] / "dashboards" / "app.py"
BEFORE = "loop/loop_core_graph_torch.pt.trace.json.gz"
AFTER = "loop/loop_core_torch.pt.trace.json.gz"


def test_compare_two_bundled_traces_side_by_side() -> None:
    at = AppTest.from_file(str(APP), default_timeout=240)
    at.session_state["example"] = BEFORE
    at.session_state["compare"] = True
    at.session_state["compare_with"] = AFTER
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="example").value == BEFORE and at.selectbox(key="compare_with").value == AFTER
    assert [h.value for h in at.header] == ["A/B: before vs after"]
    assert [s.value for s in at.subheader] == ["Step groups", "Attention kernel groups", "Side by side", "Findings"]
    (verdict,) = at.error
    assert "regressed: ProfilerStep# decode B 128-255 [flashinfer-cuda-core]" in verdict.value
    steps = next(d.value for d in at.dataframe if "group" in d.value.columns and
                 d.value["group"].str.startswith("ProfilerStep#").any())
    decode = steps[steps["group"] == "ProfilerStep# decode B 128-255 [flashinfer-cuda-core]"].iloc[0]
    assert decode["verdict"] == "regressed" and decode["n before"] == decode["n after"] == 234
    assert "idle-host grew" in decode["cause"]
    assert len(at.get("image")) == 2  # latency against batch size, the two timelines
