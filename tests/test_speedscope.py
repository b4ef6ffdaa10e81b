"""The findings export (`analyze --format perfetto`: Chrome's Trace Event Format) opened in a real viewer:
speedscope 1.25.0 (jlfwong/speedscope, MIT; its npm release vendored in tests/vendor/speedscope-1.25.0 with its
LICENSE, 1 MB, nothing fetched), a static offline app that imports Chrome trace JSON. The release and the export
are served from one local folder over 127.0.0.1 and loaded in headless Chromium with `#profileURL=`; speedscope
lists one profile per track, and the test checks every root cause's track is among them under its name, opens the
first one (its slices, by name, in the sandwich view's table) and keeps a screenshot as
test-artifacts/speedscope_findings.png. The Perfetto UI itself cannot be fetched here (ui.perfetto.dev)."""

from __future__ import annotations

import functools
import http.server
import io
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from traceinsight.cli.main import main

pytest.importorskip("websockets", reason="the DevTools client (websockets, a dependency of streamlit) is absent")
if not any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")):
    pytest.skip("headless Chromium is not installed (apt-get install -y chromium; .ci/run installs it)",
                allow_module_level=True)

from chromium import free_port, headless  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SPEEDSCOPE = REPO / "tests" / "vendor" / "speedscope-1.25.0"
DEMO = REPO / "examples" / "h200" / "flashinfer_decode_sweep.pt.trace.json.gz"
DEMO_META = REPO / "examples" / "h200" / "flashinfer_decode_sweep.meta.json.gz"
WINDOW = (1400, 800)
LOAD_TIMEOUT_S = 60


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture()
def site(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A folder with speedscope's release and the export of the bundled sweep (with its sidecar), served on a free
    localhost port: (base URL, folder)."""
    folder = tmp_path / "site"
    shutil.copytree(SPEEDSCOPE, folder)
    r = CliRunner().invoke(main, ["analyze", str(DEMO), "--meta", str(DEMO_META), "--format", "perfetto",
                                  "--out", str(folder / "findings.json")])
    assert r.exit_code == 0, r.output
    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", folder
    finally:
        server.shutdown()
        server.server_close()


def test_the_export_opens_in_speedscope_with_a_track_per_root_cause(site: tuple[str, Path], tmp_path: Path) -> None:
    import orjson
    from PIL import Image  # a dependency of streamlit

    base, folder = site
    doc = orjson.loads((folder / "findings.json").read_bytes())
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    processes = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "process_name"}
    roots = [(tid, name) for (pid, tid), name in sorted(threads.items()) if pid == 3]
    assert [n for _, n in roots][:3] == ["CRITICAL split-kv-off", "CRITICAL split-kv-starved", "WARNING slow-path"]

    with headless(tmp_path / "chromium-profile") as page:
        page.open(f"{base}/index.html#profileURL={base}/findings.json", WINDOW)
        text = page.wait_text(lambda t: re.search(r"\(1/\d+\)", t) or "went wrong" in t, LOAD_TIMEOUT_S)
        assert re.search(r"\(1/\d+\)", text), f"speedscope did not load the export:\n{text[:2000]}"
        # One profile per track (speedscope names it "<process> (pid P), <thread> (tid T)"), listed in its profile
        # selector: the GPU's streams, the steps, and every root cause's track.
        listed = page.evaluate("Array.from(document.querySelectorAll('td span, span')).map(e => e.textContent)")
        assert f"/{len(threads)})" in text
        for tid, name in roots:
            assert f"{processes[3]} (pid 3), {name} (tid {tid})" in listed, name
        assert f"{processes[1]} (pid 1)" in " ".join(listed)
        # The first root cause's track: its four bursts of split-KV-off steps, drawn (time order) and listed by
        # name (sandwich view: a table in the page).
        target = 1 + sum(1 for pid, _ in threads if pid < 3)  # its position among the profiles
        for _ in range(target - 1):
            page.key("n")
        text = page.wait_text(lambda t: f"({target}/" in t, 10)
        assert f"CRITICAL split-kv-off (tid {roots[0][0]}) ({target}/{len(threads)})" in text, text[:500]
        page.wait_text(lambda t: False, 1.0)  # let the flame chart draw
        shot, _ = page.keep("speedscope_findings")
        page.key("3")
        table = page.wait_text(lambda t: "Symbol Name" in t, 10)
        rows = re.findall(r"^\s*split-kv-off \{.*\"first_step\":(\d+),\"last_step\":(\d+)\}$", table, re.M)
        assert sorted((int(a), int(b)) for a, b in rows) == [(66, 77), (105, 116), (144, 155), (180, 194)], table[:3000]
    image = Image.open(io.BytesIO(shot)).convert("RGB")
    assert image.size == WINDOW
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50, "the screenshot is (almost) one colour: nothing was drawn"
