"""`traceinsight diff BEFORE AFTER`: what changed between two traces (or two saved analyses: `analyze --format
json` documents, `analyze --save` folders): per kernel family, per attention kernel (time, split-KV state),
thresholds and findings."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from traceinsight.cli.errors import user_errors
from traceinsight.cli.output import console

if TYPE_CHECKING:
    from traceinsight.report.gate_samples import KernelSamples

EXIT_REGRESSED = 3


def _doc(path: Path, meta: tuple[str, ...], step_pattern: str | None) -> tuple[dict[str, Any], KernelSamples | None]:
    """The analysis document of `path`, with every kernel's execution times when `path` is a trace."""
    from traceinsight.report.analysis_json import is_analysis_json, load_analysis_json
    from traceinsight.report.saved import is_saved_folder

    if is_saved_folder(path):
        return _saved_doc(path), None
    if is_analysis_json(path):
        return load_analysis_json(path), None
    from traceinsight.api import Analysis
    from traceinsight.pipeline import analyze
    from traceinsight.queries import sql
    from traceinsight.report.gate import SAMPLED_FAMILIES
    from traceinsight.report.gate_samples import kernel_samples
    from traceinsight.report.json_doc import STEPS_ALL
    from traceinsight.report.saved import document

    result = Analysis(*analyze([path], meta=[Path(m) for m in meta], step_pattern=step_pattern))
    a = result.analyses[0]
    rows = result.db.rows(sql("kernel_durations"), {"trace": a.trace_id, "families": list(SAMPLED_FAMILIES)})
    return document(result.documents(), a.trace_id, STEPS_ALL), kernel_samples(rows)


def _saved_doc(path: Path) -> dict[str, Any]:
    """The document of the one trace a saved-analysis folder holds (`analyze --save DIR`)."""
    from traceinsight.errors import FormatError
    from traceinsight.report import saved
    from traceinsight.report.json_doc import STEPS_ALL

    src = saved.open_saved(path)
    if len(src.names) != 1:
        raise FormatError(f"{path}: holds {len(src.names)} saved analyses; diff compares one trace with one trace")
    return saved.document(src, next(iter(src.names)), STEPS_ALL)


def parse_share(text: str | None, option: str) -> float | None:
    """'5%' or '0.05' -> 0.05; a value outside (0, 1) or not a number is an InputError naming the option."""
    if text is None:
        return None
    from traceinsight.errors import InputError

    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise InputError(f"{option} {text!r}: expected a share such as 5% or 0.05") from None
    if not 0 < v < 1:
        raise InputError(f"{option} {text!r}: expected a share between 0 and 100% (exclusive), such as 5%")
    return v


@click.command(name="diff")
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "json", "html", "markdown", "md"]), default="text",
              show_default=True, help="json follows the schema traceinsight.diff/1; html is a self-contained page; "
              "markdown (or md) is a pull-request comment.")
@click.option("--out", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file instead of stdout.")
@click.option("--meta-before", multiple=True, type=click.Path(path_type=str), help="Sidecar for BEFORE.")
@click.option("--meta-after", multiple=True, type=click.Path(path_type=str), help="Sidecar for AFTER.")
@click.option("--step-pattern", default=None, metavar="REGEX", help="As in `analyze`.")
@click.option("--fail-on-regression", "fail_on", default=None, metavar="SHARE",
              help="Exit 3 when a step or kernel group regressed by more than SHARE (5% or 0.05): its median's or "
                   "p90's confidence interval lies wholly above it. Sets both thresholds unless given below.")
@click.option("--threshold-median", default=None, metavar="SHARE",
              help="The change of a group's median its interval must clear for a verdict [default: 5%].")
@click.option("--threshold-p90", default=None, metavar="SHARE",
              help="The change of a group's p90 its interval must clear for a verdict [default: 5%].")
@click.option("--noise", "noise", multiple=True, type=click.Path(path_type=Path), metavar="AA_DIFF.json",
              help="A diff of two captures of the same workload (`diff A1 A2 --format json`); repeatable. Each "
                   "group's threshold grows by the largest change its A/A diffs show (the run-to-run noise).")
@click.option("--step-metric", type=click.Choice(["gpu", "wall"]), default="gpu", show_default=True,
              help="What step groups are gated on: each step's GPU busy time (its kernels), or its wall time (host "
                   "time included, which varies between processes: calibrate it with --noise).")
@user_errors
def command(before: Path, after: Path, fmt: str, out: Path | None, meta_before: tuple[str, ...],
            meta_after: tuple[str, ...], step_pattern: str | None, fail_on: str | None,
            threshold_median: str | None, threshold_p90: str | None, noise: tuple[Path, ...],
            step_metric: str) -> None:
    """Compare BEFORE and AFTER (trace files, JSON written by `analyze --format json`, or folders written by
    `analyze --save`): steps and kernels paired by kind, the change of each group's median and p90 with a
    bootstrap confidence interval, a verdict where it clears the threshold and its cause; per kernel family and
    attention kernel the change in time and split-KV state, thresholds, and new/gone/changed findings.

    Exit status: 0 ok; 2 bad input (one line on stderr); 3 a group regressed beyond --fail-on-regression."""
    from traceinsight.report.diff import diff_docs
    from traceinsight.report.diff_html import render_html
    from traceinsight.report.diff_text import render_text
    from traceinsight.report.gate_groups import DEFAULT_THRESHOLD, Thresholds

    fail = parse_share(fail_on, "--fail-on-regression")
    base = fail if fail is not None else DEFAULT_THRESHOLD
    med = parse_share(threshold_median, "--threshold-median")
    p90 = parse_share(threshold_p90, "--threshold-p90")
    cal = None
    if noise:
        from traceinsight.report.analysis_json import load_analysis_json
        from traceinsight.report.gate_calibration import calibration

        cal = calibration([(str(p), load_analysis_json(p)) for p in noise])
    th = Thresholds(median=med if med is not None else base, p90=p90 if p90 is not None else base, calibration=cal,
                    step_metric=step_metric)
    doc_b, samples_b = _doc(before, meta_before, step_pattern)
    doc_a, samples_a = _doc(after, meta_after, step_pattern)
    d = diff_docs(doc_b, doc_a, samples_b, samples_a, th)
    if fmt == "json":
        data = orjson.dumps(d, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"
        if out:
            out.write_bytes(data)
        else:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
    elif fmt in ("html", "markdown", "md"):
        if fmt == "html":
            text = render_html(d, (doc_b, doc_a))
        else:
            from traceinsight.report.diff_markdown import render_markdown

            text = render_markdown(d)
        if out:
            out.write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
    elif out:
        from traceinsight.report.console import make_console

        with open(out, "w", encoding="utf-8") as fh:
            render_text(d, make_console(file=fh, no_color=True))
    else:
        render_text(d, console())
    if fail is not None and d["gate"]["regressed"]:
        sys.exit(EXIT_REGRESSED)
