"""The dashboard's A/B view (dashboards/compare_view.py) under Streamlit's test harness: examples/abtest's base
capture (before) against the one with split-KV forced off (after): the FA2 decode kernel's median grows 4.4x
(examples/abtest/README.md: attention 7.93 -> 33.62 ms over the 40 steps) and the gate names the split."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the dashboard extra (streamlit) is not installed")

from streamlit.testing.v1 import AppTest  # noqa: E402

APP = Path(__file__).resolve().parents[1] / "dashboards" / "app.py"
BEFORE = "abtest/aa1.pt.trace.json.gz"
AFTER = "abtest/ab_split_off.pt.trace.json.gz"


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
    assert "regressed: ProfilerStep# decode B 16-31 [flashinfer-fa2]" in verdict.value
    assert "split-KV now off at B >= 25 (B_th = 33)" in verdict.value
    kernels = next(d.value for d in at.dataframe if "group" in d.value.columns and
                   d.value["group"].str.startswith("attention").any())
    attn = kernels[kernels["group"].str.startswith("attention BatchPrefillWithPagedKVCacheKernel decode")].iloc[0]
    assert attn["verdict"] == "regressed" and attn["n before"] == attn["n after"] == 80
    assert len(at.get("image")) == 2  # latency against batch size, the two timelines
