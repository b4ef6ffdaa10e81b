"""The dashboard in a real browser: `traceinsight dashboard PATH` (which runs `streamlit run dashboards/app.py`)
on a free localhost port, opened by headless Chromium (Debian's `chromium`), which waits until the
page has rendered the findings, then takes a screenshot kept as test-artifacts/dashboard.png.

Chromium is driven through its DevTools protocol (the `websockets` client Streamlit itself depends on): a plain
`--screenshot` fires before Streamlit's websocket has delivered the page, so the test polls the rendered text
instead and fails on a blank page or a Python exception shown in the page.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the dashboard extra (streamlit) is not installed")
from chromium import REPO, WINDOW, DevTools, free_port, headless, wait_http  # noqa: E402

SMALL = "flashinfer_decode_small.pt.trace.json.gz"
RENDER_TIMEOUT_S = 180
# Text the page shows once the whole script ran (the last section's heading).
DONE_MARK = "Per-SM schedule"
ERROR_MARKS = ("Traceback", "Cannot analyze", "Internal error", "StreamlitAPIException", "Error running app")


def _serve(args: list[str], tmp_path: Path, python: str = sys.executable,  # type: ignore[no-untyped-def]
           checkout: bool = True):
    """`traceinsight dashboard ARGS --port P --host 127.0.0.1 --headless`, as a user starts it, with `python` (the
    checkout first on its path unless `checkout` is False: tests/test_wheel.py serves the installed wheel's);
    yields its URL."""
    port = free_port()
    env = dict(os.environ)
    if checkout:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    else:
        env.pop("PYTHONPATH", None)
    cmd = [python, "-m", "traceinsight", "dashboard", *args, "--port", str(port), "--host", "127.0.0.1",
           "--headless"]
    log = open(tmp_path / "dashboard.log", "wb")  # noqa: SIM115
    # Its own process group: the CLI runs `streamlit run` as a child, and both must stop at the end.
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
                            start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/_stcore/health", 60, proc)
        yield f"http://127.0.0.1:{port}/"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.fixture()
def dashboard(h200: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    yield from _serve([str(h200 / SMALL)], tmp_path)


@pytest.fixture()
def fleet_dashboard(fleet_dataset: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    yield from _serve(["--fleet", str(fleet_dataset)], tmp_path)


@pytest.fixture()
def browser(tmp_path: Path):  # type: ignore[no-untyped-def]
    with headless(tmp_path / "chromium-profile") as page:
        yield page


def _render(browser: DevTools, url: str, done: str, name: str, in_dom: tuple[str, ...] = ()) -> tuple[str, bytes, str]:
    """Open `url`, wait until the page shows `done` and its DOM holds every string of `in_dom` (the data grids fill
    their hidden tables after the text is up: seconds later on a loaded machine), or an error; keep a screenshot
    and the DOM as test-artifacts/`name`.png|.dom.html. Returns the page's text, the screenshot and the DOM."""
    browser.open(url)
    deadline = time.monotonic() + RENDER_TIMEOUT_S
    text = ""
    while time.monotonic() < deadline:
        text = browser.text()
        if any(m in text for m in ERROR_MARKS):
            break
        if done in text and "Running..." not in text:
            html = str(browser.evaluate("document.documentElement.outerHTML")) if in_dom else ""
            if all(m in html for m in in_dom):
                break
        time.sleep(0.5)
    time.sleep(1.5)  # let the charts (Vega) finish drawing before the screenshot
    text = browser.text()
    shot, dom = browser.keep(name)
    return text, shot, dom


def test_dashboard_renders_findings_in_chromium(dashboard: str, browser: DevTools) -> None:
    from PIL import Image  # a dependency of streamlit

    text, shot, dom = _render(browser, dashboard, DONE_MARK, "dashboard")

    assert not any(m in text for m in ERROR_MARKS), text[:2000]
    assert DONE_MARK in text, f"the page did not finish rendering within {RENDER_TIMEOUT_S} s:\n{text[:2000]}"
    # Findings first: the section, with the trace's own content, above the timeline.
    assert "Findings" in text and text.index("Findings") < text.index("Step timeline")
    assert SMALL in text and "NVIDIA H200" in text
    # The small trace runs its tensor-core decode cases (tc=1) on FlashInfer's SM90 PrefillWithKVCacheKernel
    # (traces/README.md): the decode-on-prefill-kernel finding must be on the page.
    assert "decode-on-prefill-kernel" in text
    assert "BatchDecodeWithPagedKVCacheKernel" in dom
    assert dom.count("<canvas") + dom.count("<svg") >= 3  # the Vega charts were drawn
    image = Image.open(io.BytesIO(shot)).convert("RGB")
    assert image.size == WINDOW
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 200, "the screenshot is (almost) one colour: a blank page"


def test_dashboard_fleet_page_in_chromium(fleet_dashboard: str, browser: DevTools) -> None:
    """`traceinsight dashboard --fleet DIR` opens on the fleet report of the dataset (conftest's fleet_dataset)."""
    text, _, dom = _render(browser, fleet_dashboard, "Not analyzed", "dashboard_fleet",
                           in_dom=("sweep_q64kv8d128_nsys", "split-kv-off", "broken"))
    assert not any(m in text for m in ERROR_MARKS), text[:2000]
    assert "Not analyzed" in text, f"the fleet page did not finish rendering:\n{text[:2000]}"
    for part in ("traceinsight fleet", "Root causes", "Traces", "Worst steps", "Outliers"):
        assert part in text
    assert "4 of 5" in text  # traces analyzed; the fifth is not a trace
    assert "sweep_q64kv8d128_nsys" in dom and "split-kv-off" in dom and "broken" in dom
    assert dom.count("<canvas") + dom.count("<svg") >= 1  # the time-lost chart was drawn
    # ... with room for its bars: a band of 24 px for each of the 3 traces that lost time, plus its axis and legend
    # (a chart given a fixed height in a stretched container was drawn 120 px tall, its bars squashed to a line).
    import re

    heights = [int(h) for h in re.findall(r'class="marks" width="\d+" height="(\d+)"', dom)]
    assert heights and max(heights) >= 3 * 24 + 100, heights
