"""Terminal output: findings first, compact tables, colour only on a terminal and never with NO_COLOR.

The small H200 trace (checked with `zcat | python -c json.load`): 48 kernel events, 12 each of
BatchDecodeWithPagedKVCacheKernel, PersistentVariableLengthMergeStatesKernel and the SM90
PrefillWithKVCacheKernel; 18 `decode_step tc=T dist=D bs=B step=S` ranges (6 cases x 3 steps).
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from traceinsight.pipeline import analyze
from traceinsight.report.console import OPTIONAL_COLUMNS, content_widths, make_console, natural_width
from traceinsight.report.progress import ingest_progress
from traceinsight.report.saved import document_of
from traceinsight.report.text import attention_kernels_table, families_table, render_doc, steps_table, thresholds_table
from traceinsight.units import fmt_ns

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def small(h200: Path):  # type: ignore[no-untyped-def]
    _, result = analyze([h200 / "flashinfer_decode_small.pt.trace.json.gz"])
    return result[0]


def test_plain_output_when_not_a_terminal(small) -> None:  # type: ignore[no-untyped-def]
    buf = io.StringIO()
    render_doc(document_of(small), make_console(file=buf, width=200), max_steps=None)
    out = buf.getvalue()
    assert not ANSI.search(out)
    assert "NVIDIA H200, 132 SMs" in out
    assert re.search(r"BatchDecodeWithPagedKVCacheKernel\s+flashinfer-cuda-core\s+decode\s+12\s", out)
    assert len(re.findall(r"decode_step tc=\d dist=\w+ bs=\d+ step=\d", out)) == 18
    # Findings (when there are any) come before every table.
    first_table = out.index("Kernel time by family")
    if "Findings: " in out:
        assert out.index("Findings: ") < first_table
    assert out.index("Attention kernels") < out.index("Steps (")
    # What was checked, not only what fired (the rules that ran are listed in the JSON's `checks`).
    assert re.search(r"\d+ rules checked: .*passed", out)


def test_colour_on_a_terminal_and_no_colour_with_no_color(small, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    doc = document_of(small)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    buf = io.StringIO()
    render_doc(doc, make_console(file=buf, force_terminal=True), max_steps=5)
    assert ANSI.search(buf.getvalue())
    monkeypatch.setenv("NO_COLOR", "1")
    buf = io.StringIO()
    render_doc(doc, make_console(file=buf, force_terminal=True), max_steps=5)
    assert not ANSI.search(buf.getvalue())


def test_findings_lead_with_severity_and_saving() -> None:
    """A document with findings (shape of `Finding.to_json`): worst first, one line each, the saving shown."""
    doc = {"trace": {"path": "t.json", "format": "kineto", "gpu": {}}, "kernels": [], "families": [], "steps": [],
           "findings": [
               {"id": "threshold-proximity", "severity": "info", "steps": [], "summary": "B is near B_th",
                "saving_ns": None, "remedy": ""},
               {"id": "split-kv-off", "severity": "critical", "steps": [3, 4], "summary": "one CTA walks it alone",
                "saving_ns": 12_500_000, "remedy": "cap the batch below B_th"},
           ]}
    buf = io.StringIO()
    render_doc(doc, make_console(file=buf))
    lines = [line for line in buf.getvalue().splitlines() if line.strip()]
    i = next(n for n, line in enumerate(lines) if line.startswith("Findings: 2 root causes"))
    assert re.match(r"CRITICAL\s+split-kv-off\s+12.5 ms\s+one CTA walks it alone$", lines[i + 1])
    assert "→ cap the batch below B_th" in lines[i + 2]
    # An INFO cause without a saving is minor: folded into one line.
    assert re.match(r"INFO\s+\+1 minor\s+threshold-proximity$", lines[i + 3])


def test_fmt_ns() -> None:
    assert [fmt_ns(v) for v in (None, 850, 12_300, 4_560_000, 1_230_000_000, 250_000_000)] == [
        "-", "850 ns", "12.3 us", "4.56 ms", "1.23 s", "250 ms"]


def test_progress_is_silent_off_a_terminal(h200: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    with ingest_progress([h200 / "flashinfer_decode_sweep.pt.trace.json.gz"]):
        pass
    with ingest_progress([h200 / "flashinfer_decode_sweep.pt.trace.json.gz"], quiet=True):
        pass
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_savings_are_shares_of_the_time_they_lie_in(h200: Path) -> None:
    """On the real export the GPU idles 57% of the time between the first and last step (outside the steps'
    windows): that saving lies between
    steps, so it is a share of that span (the rule's own figure), not of the steps' time (it would read 167%);
    the other savings stay shares of step time. The same line in text, Markdown and HTML."""
    from traceinsight.report.sections import saving_share, steps_span_ns, total_step_ns

    _, (a,) = analyze([h200 / "flashinfer_decode.sqlite"], cache=False)
    doc = document_of(a)
    idle = next(f for f in doc["findings"] if f["id"] == "gpu-idle-gaps")
    assert saving_share(doc, "gpu-idle-gaps", idle["saving_ns"], idle["evidence"]) == (
        f"{idle['evidence']['idle_fraction']:.0%} of the time from first to last step"
    )
    assert idle["saving_ns"] / steps_span_ns(doc) <= 1 < idle["saving_ns"] / total_step_ns(doc)
    split = next(f for f in doc["findings"] if f["id"] == "split-kv-off")
    assert saving_share(doc, "split-kv-off", split["saving_ns"]).endswith("% of the steps' time")
    buf = io.StringIO()
    render_doc(doc, make_console(file=buf))
    # The terminal's saving column shows the same share as the rule's own sentence.
    assert re.search(r"gpu-idle-gaps\s+\S+ \S+ 57% GPU idle between steps 57% of the time from the first step",
                     buf.getvalue())
    from traceinsight.report.html import verdict_html
    from traceinsight.report.markdown import verdict_md

    assert "57% of the time from first to last step" in verdict_md(doc)
    assert "57% of the time from first to last step" in verdict_html(doc)


# The attention-kernel table's columns of the sweep trace at each width (read off the report once, then held).
HEADER_AT_WIDTH = {
    80: ["kernel", "count", "time", "share"],
    100: ["kernel", "backend", "count", "time", "share", "max"],
    120: ["kernel", "backend", "phase", "count", "time", "share", "median", "max"],
    160: ["kernel", "backend", "phase", "count", "time", "share", "median", "p90", "p99", "min", "max", "stddev"],
}


@pytest.mark.parametrize("width", [80, 100, 120, 160])
def test_narrow_terminals_drop_columns_instead_of_folding_rows_into_blank_lines(h200: Path, width: int) -> None:
    """At 120 columns (a pipe's default) the kernel and steps tables used to squeeze their widest columns to
    nothing, and rich folded them into blank continuation lines under every row. Now a table gives up its
    optional columns (grids, stddev, min, median, predicted, ...) until it fits: no runs of blank lines, no line
    wider than the terminal, and the numbers that stay are whole."""
    _, (a,) = analyze([h200 / "flashinfer_decode_sweep.pt.trace.json.gz"],
                      meta=[h200 / "flashinfer_decode_sweep.meta.json.gz"], cache=False)
    buf = io.StringIO()
    render_doc(document_of(a), make_console(file=buf, width=width), max_steps=40)
    out = buf.getvalue()
    assert "\n\n\n" not in out
    assert max(len(line) for line in out.splitlines()) <= width
    kernels = out.split("Attention kernels\n", 1)[1].split("\n\n", 1)[0].splitlines()
    header, rows = kernels[0], kernels[2:]
    assert {"count", "time", "share"} <= set(header.split())
    assert len(rows) == 3 and all(re.search(r"\d+ (ms|us)\b", r) and "…" not in r.split()[-1] for r in rows)
    # The optional columns given up, widest terminal last: each width keeps those of the narrower ones.
    assert header.split() == HEADER_AT_WIDTH[width]


def test_fit_measures_tables_as_rich_does(h200: Path) -> None:
    """`fit` measures each column once and adds up the table's width itself (rich measured the whole table again
    after every column dropped: most of the time of a text report): the sum equals rich's own measurement of
    the table, with the optional columns dropped one after the other."""
    from rich.measure import Measurement

    _, (a,) = analyze([h200 / "flashinfer_decode_sweep.pt.trace.json.gz"], cache=False)
    doc = document_of(a)
    console = make_console(file=io.StringIO(), width=100)
    tables = [t for t in (thresholds_table(doc), families_table(doc), attention_kernels_table(doc),
                          steps_table(doc, 40)) if t is not None]
    assert len(tables) >= 3
    for table in tables:
        content = content_widths(table, console)
        for name in (None, *OPTIONAL_COLUMNS):
            if name is not None:
                table.columns[:] = [c for c in table.columns if c.header != name]
                for i, column in enumerate(table.columns):
                    column._index = i
            rich_width = Measurement.get(console, console.options.update_width(1 << 16), table).maximum
            assert natural_width(table, content) == rich_width


def test_a_trace_without_grids_prints_none_rather_than_made_up_ones() -> None:
    """ROCm traces (TraceLens' SGLang MI300X capture) record no launch grid: the kernel table printed
    '(None,None,None)' and the steps table '(0,0,0)'."""
    trace = Path(__file__).resolve().parent / "data" / "foreign" / "tracelens" / "sglang_mi300x_Qwen3-8B_decode.json.gz"
    _, (a,) = analyze([trace], cache=False)
    buf = io.StringIO()
    render_doc(document_of(a), make_console(file=buf, width=220), max_steps=5)
    out = buf.getvalue()
    assert "paged_attention_ll4mi_QKV_mfma16_kernel" in out
    assert "None" not in out and "(0,0,0)" not in out
