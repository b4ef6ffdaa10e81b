"""The HTML and Markdown reports of the bundled H200 sweep trace (with its sidecar): every section present and
in order, plots embedded, no URL at all (it must open offline), and the numbers in the tables are the trace's.

Numbers checked independently of traceinsight with `zcat ... | python -c 'json.load'`: the trace holds 1074
kernel events, 260 of them BatchDecodeWithPagedKVCacheKernel; the 390 `decode tc=T dist=D bs=B step=S` ranges
cover batch sizes 8, 16, 32, 64, 96, 128, 192, 256, 296, 297, 320, 384, 512; the longest BatchDecode kernel
runs 13.5 ms at grid (384,4,1) (skew80, B=384). traces/README.md: B_th = 297, max grid 132 x 9 = 1188.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from traceinsight.pipeline import analyze
from traceinsight.report.files import write_report
from traceinsight.report.html import SECTIONS
from traceinsight.report.saved import in_memory

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h200"
TRACE = EXAMPLE / "flashinfer_decode_sweep.pt.trace.json.gz"
META = EXAMPLE / "flashinfer_decode_sweep.meta.json.gz"
URL_ATTRS = {"src", "href", "xlink:href", "action", "poster", "srcset", "data", "background", "formaction"}


class Page(HTMLParser):
    """Collects the sections in order, the text of each, resource-bearing attributes and inline styles."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.text: dict[str, list[str]] = {}
        self.refs: list[str] = []
        self.styles: list[str] = []
        self.svgs: dict[str, int] = {}
        self._current: str | None = None
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("data-section"):
            self._current = a["data-section"]
            self.sections.append(self._current)
            self.text[self._current] = []
        if tag == "svg" and self._current:
            self.svgs[self._current] = self.svgs.get(self._current, 0) + 1
        if tag == "style":
            self._in_style = True
        for k, v in attrs:
            if k in URL_ATTRS and v is not None:
                self.refs.append(v)
            if k == "style" and v:
                self.styles.append(v)

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)
        elif self._current:
            self.text[self._current].append(data)

    def section_text(self, name: str) -> str:
        return " ".join(" ".join(self.text.get(name, [])).split())


@pytest.fixture(scope="module")
def analyses():  # type: ignore[no-untyped-def]
    _, result = analyze([TRACE], meta=[META])
    return result


@pytest.fixture(scope="module")
def html_page(analyses, tmp_path_factory) -> tuple[str, Page]:  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("html") / "report.html"
    write_report(in_memory(analyses), "html", out)
    text = out.read_text(encoding="utf-8")
    page = Page()
    page.feed(text)
    return text, page


def test_html_sections_in_order(html_page: tuple[str, Page]) -> None:
    _, page = html_page
    assert page.sections == [sid for sid, _ in SECTIONS]


def test_html_has_no_url_and_opens_offline(html_page: tuple[str, Page]) -> None:
    text, page = html_page
    assert all(ref.startswith("#") for ref in page.refs), [r for r in page.refs if not r.startswith("#")][:5]
    assert not any(re.search(r"url\(\s*['\"]?(?!#)", s) for s in page.styles)
    assert not re.search(r"@import", text)
    # Not even a namespace or DOCTYPE URL: nothing a browser could try to fetch.
    assert "http://" not in text and "https://" not in text
    assert "<script" not in text


def test_html_plots_are_inline_svg(html_page: tuple[str, Page]) -> None:
    _, page = html_page
    assert page.svgs.get("timeline") == 1
    assert page.svgs.get("sweep") == 1
    assert page.svgs.get("schedule") == 1  # the sidecar gives the batch compositions the simulator needs
    assert page.svgs.get("breakdown") == 1


def test_html_breakdown_attributes_the_cliff_to_attention(html_page: tuple[str, Page]) -> None:
    """The worst incident of the sweep (skew80 past B_th) is split-KV off, and nearly all its excess went to
    attention: the section's table says both."""
    _, page = html_page
    text = page.section_text("breakdown")
    first = re.search(r"steps (\d+)-(\d+) split-kv-off .*? attention \+[\d.]+ ms \((\d+)%\)", text)
    assert first is not None, text[:600]
    assert int(first.group(3)) >= 90


def test_html_verdict_names_the_cliff(html_page: tuple[str, Page]) -> None:
    _, page = html_page
    verdict = page.section_text("verdict")
    assert "split-kv-off" in verdict
    assert "critical" in verdict.lower()
    assert "saves" in verdict
    assert re.search(r"\d+ rules checked: \d+ fired", verdict)  # and what was checked and passed


def test_html_tables_hold_the_trace_numbers(html_page: tuple[str, Page]) -> None:
    text, page = html_page
    kernels = page.section_text("kernels")
    assert re.search(r"BatchDecodeWithPagedKVCacheKernel attention flashinfer-cuda-core \w+ 260 ", kernels)
    assert "13.5 ms" in kernels  # the longest BatchDecode kernel
    thresholds = page.section_text("thresholds")
    assert re.search(r"BatchDecodeWithPagedKVCacheKernel flashinfer-cuda-core 128 threads, 56 regs, 9 KiB smem 4 9 "
                     r"1188 297", thresholds)
    assert "on ≤ 296, off ≥ 297" in thresholds  # the switch the sweep shows, next to the computed B_th
    sweep = page.section_text("sweep")
    assert "B_th = 297" in sweep  # drawn in the figure (SVG text) and said below it
    assert "tc=0" in sweep and "tc=1" in sweep


def test_html_gantt_shows_the_tail(html_page: tuple[str, Page]) -> None:
    _, page = html_page
    schedule = page.section_text("schedule")
    assert "Tail:" in schedule and "SMs are idle" in schedule
    # The longest launch of the split-kv-off finding: step 155 (B = 512, 13.5 ms; the steps' own durations).
    assert "Step 155: decode tc=0 dist=skew80 bs=512 step=2" in schedule
    assert "grid (512,4,1) · split-KV off" in schedule and "measured 13.5 ms" in schedule


HOSTILE = '<script>alert("x")</script> & \'q\''


def test_html_escapes_text_from_the_trace(analyses) -> None:  # type: ignore[no-untyped-def]
    """A finding's text, a step name and the trace path come from the trace (kernel and range names, file names):
    markup in them reaches the page as text, never as a tag or an attribute break."""
    from traceinsight.report.files import report_inputs
    from traceinsight.report.html import render

    docs, gantts = report_inputs(in_memory(analyses))
    doc = docs[0]
    f = next(f for f in doc["findings"] if f["id"] == "split-kv-off")
    f["summary"] = f["explanation"] = f["remedy"] = HOSTILE
    f["evidence"] = {**f["evidence"], "cause": HOSTILE}
    doc["steps"][f["steps"][0]]["name"] = HOSTILE
    doc["trace"]["path"] = f"/tmp/{HOSTILE}.json"
    text = render(docs, gantts)
    assert "<script" not in text and "alert(\"x\")" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#x27;q&#x27;" in text
    page = Page()
    page.feed(text)
    verdict = page.section_text("verdict")
    assert verdict.count(HOSTILE) >= 5  # summary, explanation, remedy, evidence, the step's name: all as text
    assert page.sections == [sid for sid, _ in SECTIONS]  # nothing the text held broke the page's structure


def test_markdown_sections_and_figures(analyses, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "postmortem.md"
    write_report(in_memory(analyses), "md", out)
    text = out.read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings == [h for _, h in SECTIONS]
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert links == ["postmortem_figs/timeline.png", "postmortem_figs/breakdown.png", "postmortem_figs/sweep.png",
                     "postmortem_figs/schedule.png"]
    for link in links:
        data = (tmp_path / link).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert ("| BatchDecodeWithPagedKVCacheKernel | flashinfer-cuda-core | 128 threads, 56 regs, 9 KiB smem | 4 | 9 | "
            "1188 | **297** |") in text


def test_report_of_a_trace_without_attention_says_what_is_missing(foreign: Path, tmp_path: Path) -> None:
    """HTA's AlexNet trace (A100, no attention kernel): every section is there and says what it needs."""
    _, result = analyze([foreign / "hta_a100_alexnet_critical_path_trace.json.gz"])
    out = tmp_path / "r.html"
    write_report(in_memory(result), "html", out)
    page = Page()
    page.feed(out.read_text(encoding="utf-8"))
    assert page.sections == [sid for sid, _ in SECTIONS]
    for sid in ("timeline", "breakdown", "sweep", "schedule", "thresholds"):
        assert "not available" in page.section_text(sid), sid
    assert page.section_text("kernels")  # its kernels are still listed
