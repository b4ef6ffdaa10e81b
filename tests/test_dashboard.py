"""The Streamlit dashboard, driven by Streamlit's own test harness (streamlit.testing.v1.AppTest): the bundled
H200 sweep loads with its findings and charts first, a step can be selected to see its launches, the kernel
filters work, and a broken upload gives one clear error, not a traceback.

Checked independently (zcat | python -c json.load): the sweep holds 1074 kernels, 260 of them
BatchDecodeWithPagedKVCacheKernel, and 390 `decode tc=T dist=D bs=B step=S` ranges (13 batch sizes x 5
distributions x 2 paths x 3 steps); the range `decode tc=0 dist=skew80 bs=384 step=0` holds a 13.5 ms
BatchDecode launch at grid (384,4,1).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the dashboard extra (streamlit) is not installed")

from streamlit.testing.v1 import AppTest  # noqa: E402

APP = Path(__file__).resolve().parents[1] / "dashboards" / "app.py"
TIMEOUT_S = 240  # the first run analyzes the 27 MB sweep; later runs hit the cache


@pytest.fixture(scope="module")
def app() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT_S)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _table(at: AppTest, column: str):  # type: ignore[no-untyped-def]
    """The one dataframe on the page that has `column`."""
    (df,) = [d.value for d in at.dataframe if column in d.value.columns]
    return df


def _texts(at: AppTest) -> str:
    return "\n".join(str(m.value) for m in [*at.markdown, *at.caption, *at.error, *at.warning, *at.info,
                                             *at.success])


def test_bundled_sweep_is_the_default_and_findings_come_first(app: AppTest) -> None:
    assert app.selectbox(key="example").value == "h200/flashinfer_decode_sweep.pt.trace.json.gz"
    assert [h.value for h in app.header] == ["Findings", "Step timeline", "Kernels", "Split-KV thresholds",
                                             "Per-SM schedule", "Report"]
    # The split-KV cliff of the CUDA-core kernel at B >= 297 is a critical finding, shown as an error box.
    critical = [e.value for e in app.error]
    assert any("split-kv-off" in v for v in critical), critical
    assert not any(v.startswith("Cannot analyze") for v in critical)
    assert [m.label for m in app.metric][:2] == ["steps", "time in steps"]
    assert app.metric[0].value == "390"  # the 390 `decode tc=T dist=D bs=B step=S` ranges
    # What the savings add up to: inside steps (with their floor) and between them, each against its own bound.
    assert re.search(r"savings: \S+ m?s of \S+ m?s in steps \(floor \S+ m?s\), \S+ m?s of \S+ m?s between steps",
                     _texts(app)), _texts(app)


def test_charts_timeline_sweep_and_schedule(app: AppTest) -> None:
    charts = app.get("vega_lite_chart")
    # step timeline, the selected step's breakdown against its baseline, latency vs batch size with B_th,
    # per-SM schedule
    assert len(charts) == 4
    text = _texts(app)
    assert "Tail:" in text and "SMs are idle" in text  # the Gantt's notes


def test_select_a_step_shows_its_launches(app: AppTest) -> None:
    box = app.selectbox(key="step_select")
    label = next(o for o in box.options if "decode tc=0 dist=skew80 bs=384 step=0" in o)  # "index · name · time"
    box.set_value(int(label.split(" ")[0]))
    app.run()
    assert not app.exception
    step_md = [m.value for m in app.markdown if "decode tc=0 dist=skew80 bs=384 step=0" in m.value]
    assert step_md and "split-KV off" in step_md[0] and "13.5 ms" in step_md[0]
    launches = _table(app, "split evidence")
    assert list(launches["kernel"]) == ["BatchDecodeWithPagedKVCacheKernel"]
    assert list(launches["grid"]) == ["(384, 4, 1)"]
    # The schedule of that step's launch can be drawn.
    labels = app.selectbox(key="schedule_launch").options
    app.selectbox(key="schedule_launch").set_value(labels[1]).run()
    assert not app.exception
    assert any("bs=384" in m.value for m in app.markdown)


def test_kernel_filters(app: AppTest) -> None:
    app.multiselect(key="kernel_family").set_value(["attention"]).run()
    app.text_input(key="kernel_search").set_value("BatchDecode").run()
    table = _table(app, "parameters")
    assert list(table["kernel"]) == ["BatchDecodeWithPagedKVCacheKernel"]
    assert list(table["count"]) == [260]


def test_broken_upload_gives_one_clear_error() -> None:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT_S)
    at.run()
    at.radio(key="source_kind").set_value("Upload").run()
    assert any("Upload a trace" in i.value for i in at.info)
    at.file_uploader(key="upload_trace").set_value(("broken.json", b"{not json", "application/json")).run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith("Cannot analyze this file: broken.json:"), errors
    assert "traceinsight-upload-" not in errors[0]  # the private copy's path is not shown
    assert not at.header  # nothing else rendered for a file that could not be read


def test_upload_size_limit_and_private_copies() -> None:
    import stat
    import sys

    sys.path.insert(0, str(APP.parent))
    import sources

    with pytest.raises(sources.UploadTooLarge, match=r"^big\.json: 3 MB is over the upload limit of 2 MB"):
        sources.check_size("big.json", 3 * 1024 * 1024, limit_mb=2)
    sources.check_size("ok.json", 2 * 1024 * 1024, limit_mb=2)
    with sources.private_copies([("../../etc/evil name.json.gz", b"\x1f\x8b"), ("meta.json", b"{}")]) as paths:
        folder = paths[0].parent
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert [p.name for p in paths] == ["0-evil_name.json.gz", "1-meta.json"]
        assert paths[0].read_bytes() == b"\x1f\x8b"
    assert not folder.exists()


def test_the_selected_step_is_explained_against_its_baseline(app: AppTest) -> None:
    """The default step is the worst launch (skew80 past B_th): the page says why it took what it took, and the
    attribution table gives nearly all of its excess to attention."""
    (sub,) = [h.value for h in app.subheader if h.value.startswith("Why step")]
    assert "ms" in sub
    assert "cause **split-kv-off**" in _texts(app)
    df = _table(app, "share of excess")
    top = df.iloc[0]
    assert top["component"] == "attention" and int(top["share of excess"].rstrip("%")) >= 90


def test_a_saved_analysis_opens_from_its_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`traceinsight dashboard DIR` on a folder of `analyze --save`: the trace opens from its saved tables (the
    same findings, steps and report Gantt as the analysis), and what needs the analysis object says so."""
    from click.testing import CliRunner

    from traceinsight.cli.main import main

    examples = APP.parents[1] / "examples" / "h200"
    trace = examples / "flashinfer_decode_sweep.pt.trace.json.gz"
    meta = examples / "flashinfer_decode_sweep.meta.json.gz"
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(tmp_path / "cache"))
    r = CliRunner().invoke(main, ["analyze", str(trace), "--meta", str(meta), "--save", str(tmp_path / "saved"),
                                  "--format", "json", "--out", str(tmp_path / "a.json")])
    assert r.exit_code == 0, r.output
    (tmp_path / "a.json").unlink()  # nothing but the saved tables below
    monkeypatch.setenv("TRACEINSIGHT_DASHBOARD_PATHS", str(tmp_path / "saved"))
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT_S)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="example").value == "saved/flashinfer_decode_sweep (saved)"
    assert [h.value for h in at.header] == ["Findings", "Step timeline", "Kernels", "Split-KV thresholds",
                                            "Per-SM schedule", "Report"]
    assert any("split-kv-off" in e.value for e in at.error)
    assert at.metric[0].value == "390"
    text = _texts(at)
    assert "Tail:" in text and "SMs are idle" in text  # the report's Gantt, stored with the tables
    assert "not in a saved analysis" in text  # the per-step explanation needs the analysis object
    labels = at.selectbox(key="schedule_launch").options
    at.selectbox(key="schedule_launch").set_value(labels[1]).run()
    assert not at.exception
    assert any("not in a saved analysis" in i.value for i in at.info)


def test_a_kept_analysis_opens_without_analyzing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace `traceinsight analyze` kept (analyzed twice, here as typed in its folder: a relative path) opens
    from the kept tables: the same findings and steps as its analysis, nothing analyzed; "Analyze again" gives
    what needs the analysis object (the per-step explanation)."""
    from click.testing import CliRunner

    from traceinsight.cli.main import main

    examples = APP.parents[1] / "examples" / "h200"
    trace = tmp_path / "t.pt.trace.json.gz"
    trace.write_bytes((examples / "flashinfer_decode_sweep.pt.trace.json.gz").read_bytes())
    (tmp_path / "t.meta.json.gz").write_bytes((examples / "flashinfer_decode_sweep.meta.json.gz").read_bytes())
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRACEINSIGHT_CACHE_MIN_BYTES", "0")  # the example is small: keep it anyway
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # analyzed; analyzed and kept
        r = CliRunner().invoke(main, ["analyze", trace.name, "--meta", "t.meta.json.gz", "--format", "json"])
        assert r.exit_code == 0, r.output
    assert len(list((tmp_path / "cache" / "analysis").glob("*.duckdb"))) == 1
    monkeypatch.setenv("TRACEINSIGHT_DASHBOARD_PATHS", str(trace))  # as `traceinsight dashboard` passes it

    import traceinsight.pipeline

    def no_analysis(*args: object, **kwargs: object) -> None:
        raise AssertionError("analyzed")

    with monkeypatch.context() as m:
        m.setattr(traceinsight.pipeline, "analyze", no_analysis)
        at = AppTest.from_file(str(APP), default_timeout=TIMEOUT_S)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
    text = _texts(at)
    assert "read from the analysis it kept" in text and "not in the kept analysis" in text
    assert at.metric[0].value == "390"
    assert any("split-kv-off" in e.value for e in at.error)
    kept_steps = _table(at, "split evidence")
    assert not [h.value for h in at.subheader if h.value.startswith("Why step")]
    at.toggle(key="analyze_kept").set_value(True).run()  # the analysis itself: the same page, and why
    assert not at.exception, [e.value for e in at.exception]
    assert at.metric[0].value == "390"
    assert _table(at, "split evidence").equals(kept_steps)
    assert [h.value for h in at.subheader if h.value.startswith("Why step")]
