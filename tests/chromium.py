"""Headless Chromium (Debian's `chromium`) for the browser tests, driven through its DevTools protocol with the
`websockets` client (a dependency of Streamlit): start it on a fresh profile, open one page's websocket, run
commands on it, and poll the rendered text (a page built by script shows nothing when a plain `--screenshot`
fires). Screenshots and DOM snapshots go to test-artifacts/."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
WINDOW = (1400, 2000)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("headless Chromium not found: apt-get install -y chromium (CI: .ci/run installs it)")


def wait_http(url: str, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> bytes:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - localhost only
                return bytes(r.read())
        except OSError:
            if proc is not None and proc.poll() is not None:
                pytest.fail(f"{proc.args[0]} exited with {proc.returncode} before answering {url}")
            if time.monotonic() > deadline:
                pytest.fail(f"nothing answered {url} within {timeout_s} s")
            time.sleep(0.3)


class DevTools:
    """Just enough of the DevTools protocol: numbered commands on one page's websocket."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        n = next(self.ids)
        self.ws.send(json.dumps({"id": n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return r.get("result", {}).get("value")

    def text(self) -> str:
        return str(self.evaluate("document.body ? document.body.innerText : ''") or "")

    def open(self, url: str, window: tuple[int, int] = WINDOW) -> None:
        self.call("Page.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=window[0], height=window[1], deviceScaleFactor=1,
                  mobile=False)
        self.call("Page.navigate", url=url)

    def key(self, key: str) -> None:
        """Press and release one printable key (a letter or a digit) on the page."""
        code = f"Key{key.upper()}" if key.isalpha() else f"Digit{key}"
        self.call("Input.dispatchKeyEvent", type="keyDown", key=key, code=code, text=key)
        self.call("Input.dispatchKeyEvent", type="keyUp", key=key, code=code)

    def wait_text(self, done: Any, timeout_s: float) -> str:
        """Poll the page's text until `done(text)` holds (or `timeout_s` passed); returns the last text."""
        deadline = time.monotonic() + timeout_s
        text = self.text()
        while not done(text) and time.monotonic() < deadline:
            time.sleep(0.3)
            text = self.text()
        return text

    def keep(self, name: str) -> tuple[bytes, str]:
        """A screenshot and the DOM of the page, kept as test-artifacts/`name`.png|.dom.html."""
        shot = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        dom = str(self.evaluate("document.documentElement.outerHTML"))
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / f"{name}.png").write_bytes(shot)
        (ARTIFACTS / f"{name}.dom.html").write_text(dom, encoding="utf-8")
        return shot, dom


@contextmanager
def headless(profile: Path) -> Iterator[DevTools]:
    """Headless Chromium on a fresh profile folder, no network of its own (nothing in the background), and its
    first page's DevTools websocket."""
    from websockets.sync.client import connect  # a dependency of streamlit

    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
           "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "about:blank"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("headless Chromium did not open its DevTools port")
            time.sleep(0.2)
        port = int(port_file.read_text().splitlines()[0])
        pages = json.loads(wait_http(f"http://127.0.0.1:{port}/json/list", 10))
        page = next(p for p in pages if p.get("type") == "page")
        with connect(page["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024, open_timeout=10) as ws:
            yield DevTools(ws)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
