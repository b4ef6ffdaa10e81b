"""Write a report file: `write_report(documents, 'md' | 'html', out)`, from the documents of the one builder
(`report.saved`: an analysis's tables, `traceinsight.api.Analysis.documents`, or a saved analysis). The CLI's
`analyze --format md|html --out FILE` and the dashboard's download button call it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceinsight.errors import InputError

if TYPE_CHECKING:
    from traceinsight.report.figures import Gantt
    from traceinsight.report.saved import Saved

FORMATS = ("md", "html")


def report_inputs(src: Saved) -> tuple[list[dict[str, Any]], list[Gantt | str]]:
    """The JSON documents of every trace of `src` (each with every step) and the Gantt of each one's worst launch
    (or why there is none)."""
    from traceinsight.report.json_doc import STEPS_ALL
    from traceinsight.report.saved import document, gantt

    ids = sorted(src.names)
    docs = [document(src, i, STEPS_ALL) for i in ids]
    return docs, [gantt(src, i, d) for i, d in zip(ids, docs, strict=True)]


def render_report(src: Saved, fmt: str, out: Path) -> str:
    """The report text (HTML, or Markdown whose figures are written beside `out`)."""
    docs, gantts = report_inputs(src)
    return render_documents(docs, gantts, fmt, out)


def render_documents(docs: list[dict[str, Any]], gantts: list[Gantt | str], fmt: str, out: Path) -> str:
    """The report text of analysis documents (each with every step) and their Gantts (see `render_report`)."""
    if fmt == "html":
        from traceinsight.report import html

        return html.render(docs, gantts)
    if fmt == "md":
        from traceinsight.report import markdown

        return markdown.render(docs, out, gantts)
    raise ValueError(f"unknown report format {fmt!r} (expected one of {FORMATS})")


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder, so a reader never sees half a file.
    The file gets the mode any new file gets (0666 less the umask), not the temporary file's private 0600."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(src: Saved, fmt: str, out: Path, on_stage: Callable[[str], None] | None = None) -> Path:
    """Write the `fmt` ('md' | 'html') report of every trace of `src` to `out` (Markdown: figures into
    `<stem>_figs/` beside it). `on_stage(message)` is called before the slow parts, for a progress display.
    Returns `out`."""
    out = _checked(fmt, Path(out))
    if on_stage:
        on_stage(f"writing the {fmt} report")
    write_atomic(out, render_report(src, fmt, out))
    return out


def write_documents_report(docs: list[dict[str, Any]], gantts: list[Gantt | str], fmt: str, out: Path) -> Path:
    """Write the `fmt` report of analysis documents and their Gantts to `out` (see `write_report`)."""
    out = _checked(fmt, Path(out))
    write_atomic(out, render_documents(docs, gantts, fmt, out))
    return out


def _checked(fmt: str, out: Path) -> Path:
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r} (expected one of {FORMATS})")
    if not out.parent.is_dir():
        raise InputError(f"{out}: the folder {out.parent} does not exist")
    return out
