"""`traceinsight diff BEFORE AFTER`: what changed between two traces (or two saved analyses: `analyze --format
json` documents, `analyze --save` folders): per kernel family, per attention kernel (time, split-KV state),
thresholds and findings."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import orjson

from traceinsight.cli.main import console, user_errors


def _doc(path: Path, meta: tuple[str, ...], step_pattern: str | None) -> dict[str, Any]:
    from traceinsight.report.diff import is_analysis_json, load_analysis_json
    from traceinsight.report.saved import is_saved_folder

    if is_saved_folder(path):
        return _saved_doc(path)
    if is_analysis_json(path):
        return load_analysis_json(path)
    from traceinsight.pipeline import analyze
    from traceinsight.report.json_doc import to_json

    _, analyses = analyze([path], meta=[Path(m) for m in meta], step_pattern=step_pattern)
    return to_json(analyses[0])


def _saved_doc(path: Path) -> dict[str, Any]:
    """The document of the one trace a saved-analysis folder holds (`analyze --save DIR`)."""
    from traceinsight.errors import FormatError
    from traceinsight.report import saved
    from traceinsight.report.json_doc import STEPS_ALL

    src = saved.open_saved(path)
    if len(src.names) != 1:
        raise FormatError(f"{path}: holds {len(src.names)} saved analyses; diff compares one trace with one trace")
    return saved.document(src, next(iter(src.names)), STEPS_ALL)


@click.command(name="diff")
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "json", "html"]), default="text", show_default=True,
              help="json follows the schema traceinsight.diff/1; html is a self-contained page.")
@click.option("--out", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file instead of stdout.")
@click.option("--meta-before", multiple=True, type=click.Path(path_type=str), help="Sidecar for BEFORE.")
@click.option("--meta-after", multiple=True, type=click.Path(path_type=str), help="Sidecar for AFTER.")
@click.option("--step-pattern", default=None, metavar="REGEX", help="As in `analyze`.")
@user_errors
def command(before: Path, after: Path, fmt: str, out: Path | None, meta_before: tuple[str, ...],
            meta_after: tuple[str, ...], step_pattern: str | None) -> None:
    """Compare BEFORE and AFTER (trace files, JSON written by `analyze --format json`, or folders written by
    `analyze --save`): per kernel family and attention kernel the change in time and split-KV state, thresholds,
    and new/gone/changed findings."""
    from traceinsight.report.diff import diff_docs, render_html, render_text

    d = diff_docs(_doc(before, meta_before, step_pattern), _doc(after, meta_after, step_pattern))
    if fmt == "json":
        data = orjson.dumps(d, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"
        if out:
            out.write_bytes(data)
        else:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
    elif fmt == "html":
        text = render_html(d)
        if out:
            out.write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
    elif out:
        from traceinsight.report.text import make_console

        with open(out, "w", encoding="utf-8") as fh:
            render_text(d, make_console(file=fh, no_color=True))
    else:
        render_text(d, console())
