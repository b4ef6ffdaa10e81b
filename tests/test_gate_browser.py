"""`traceinsight diff --format markdown` as a pull-request comment shows it: the Markdown turned into HTML by a
CommonMark parser with GitHub's table extension (markdown-it-py, which rich already brings), opened in headless
Chromium (Debian's `chromium`), which lays the page out and runs a script that measures each rendered table (rows,
cells per row, width on screen). The screenshot is kept as test-artifacts/diff-markdown.png (and the page as
diff-markdown.html) for the pull request's note.

The diff: examples/abtest's base capture (before) against the one with split-KV forced off (after): the FA2 decode
kernel and the step regress, split-KV named as the cause (tests/test_gate_abtest.py).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from traceinsight.cli import main

REPO = Path(__file__).resolve().parents[1]
AB = REPO / "examples" / "abtest"
ARTIFACTS = REPO / "test-artifacts"

# GitHub's comment look, near enough: bordered cells, a sans-serif font.
STYLE = """body { font: 14px -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 24px; max-width: 1800px }
table { border-collapse: collapse; margin: 12px 0 } th, td { border: 1px solid #d0d7de; padding: 6px 13px }
tr:nth-child(2n) { background: #f6f8fa } code { background: #eff1f3; padding: 2px 4px }"""
# Runs after the layout: what the browser made of each table.
MEASURE = """<script>
const tables = [...document.querySelectorAll('table')].map(t => ({
  width: t.getBoundingClientRect().width,
  header: t.querySelectorAll('thead th').length,
  rows: [...t.querySelectorAll('tbody tr')].map(r => r.querySelectorAll('td').length)}));
document.getElementById('measured').textContent = JSON.stringify(tables);
</script>"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("headless Chromium not found: apt-get install -y chromium (CI: .ci/run installs it)")


def _diff(*args: str) -> Any:
    """`traceinsight diff` of the pair (base capture, split-KV forced off), each with its sidecar."""
    traces = [str(AB / f"{name}.pt.trace.json.gz") for name in ("aa1", "ab_split_off")]
    return CliRunner().invoke(main, ["diff", *traces, "--meta-before", str(AB / "aa1.sidecar.json.gz"),
                                     "--meta-after", str(AB / "ab_split_off.sidecar.json.gz"), *args])


def _in_chromium(probe: Path, page: Path, shot: Path, window: str, tmp_path: Path) -> tuple[str, list[dict[str, Any]]]:
    """(the DOM of `probe` after Chromium laid it out, what its MEASURE script measured); the screenshot of `page`
    written to `shot`."""
    shot.unlink(missing_ok=True)
    common = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={window}"]
    dom = subprocess.run([*common, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    subprocess.run([*common, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.is_file() and shot.stat().st_size > 10_000
    measured = re.search(r"<pre id=\"measured\">(.*?)</pre>", dom, re.S)
    assert measured, dom[-2000:]
    return dom, json.loads(html.unescape(measured.group(1)))


def test_markdown_diff_renders_as_tables_in_a_browser(tmp_path: Path) -> None:
    from markdown_it import MarkdownIt

    r = _diff("--format", "markdown", "--fail-on-regression", "5%")
    assert r.exit_code == 3, r.output
    body = MarkdownIt("commonmark").enable("table").render(r.stdout)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><style>{STYLE}</style></head><body>{body}"
            f"<pre id='measured'></pre>{MEASURE}</body></html>")
    ARTIFACTS.mkdir(exist_ok=True)
    src = ARTIFACTS / "diff-markdown.html"
    src.write_text(page, encoding="utf-8")
    dom, tables = _in_chromium(src, src, ARTIFACTS / "diff-markdown.png", "1800,1400", tmp_path)
    assert len(tables) >= 2  # steps, kernels (and findings)
    for t in tables:
        assert t["width"] > 300 and t["header"] >= 4
        assert t["rows"] and all(n == t["header"] for n in t["rows"])  # every row laid out in the header's columns
    steps = tables[0]
    assert steps["header"] == 7
    text = re.sub(r"<[^>]+>", " ", dom)
    assert "regressed" in text and "split-KV now off at B &gt;= 25 (B_th = 33)" in dom


def test_html_diff_lays_out_both_runs_side_by_side(tmp_path: Path) -> None:
    """`diff --format html` of the same pair in Chromium: the gate's table and the two side-by-side figures are
    laid out with a size on screen; the screenshot is test-artifacts/diff-html.png."""
    ARTIFACTS.mkdir(exist_ok=True)
    page = ARTIFACTS / "diff.html"
    r = _diff("--format", "html", "--out", str(page))
    assert r.exit_code == 0, r.output
    measure = MEASURE.replace("document.querySelectorAll('table')", "document.querySelectorAll("
                              "'section[data-section=gate] table, section[data-section=side-by-side] svg')")
    measure = measure.replace("thead th", "thead th, g").replace("tbody tr", "tbody tr, never")
    text = page.read_text(encoding="utf-8").replace("</body>", f"<pre id='measured'></pre>{measure}</body>")
    probe = tmp_path / "diff.html"
    probe.write_text(text, encoding="utf-8")
    _, shown = _in_chromium(probe, page, ARTIFACTS / "diff-html.png", "1400,2400", tmp_path)
    assert len(shown) == 3  # the gate's table, latency against batch size, the timelines
    assert all(x["width"] > 300 for x in shown)
