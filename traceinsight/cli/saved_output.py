"""A report as `analyze` writes it, rendered from the documents of the one builder (`report.saved`): what `analyze`
prints of a fresh analysis (its tables just written) or of one it kept (cli/analysis_cache.py), and what
`traceinsight report SAVED` prints. Not a command: shared by them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from traceinsight.report.saved import Saved


def emit(src: Saved, fmt: str, out: str | None, steps: str, max_steps: int, width: int | None,
         warnings: bool = True, after_text: Callable[[Console], None] | None = None) -> list[dict[str, Any]]:
    """Write the report of every trace of `src` as `analyze` writes it (text on stdout shows the traces' warnings
    in its header unless `warnings` is False: `analyze` writes them on stderr; `after_text(console)` adds to the
    text of a file, or of several traces on stdout); return the documents (their findings at least, for
    --fail-on)."""
    from traceinsight.report import saved as saved_tables
    from traceinsight.report.json_doc import STEPS_ALL

    ids = sorted(src.names)
    if fmt == "json":
        if out:
            with open(out, "wb") as fh:
                saved_tables.write_documents(src, fh, steps)
        else:
            saved_tables.write_documents(src, sys.stdout.buffer, steps)
            sys.stdout.flush()
        return [saved_tables.findings_only(src, i) for i in ids]
    docs = [saved_tables.document(src, i, STEPS_ALL) for i in ids]
    if fmt in ("md", "html"):
        from traceinsight.report.files import render_documents, write_documents_report

        gantts = [saved_tables.gantt(src, i, d) for i, d in zip(ids, docs, strict=True)]
        if out:
            write_documents_report(docs, gantts, fmt, Path(out))
        else:
            sys.stdout.write(render_documents(docs, gantts, fmt, Path("report.html")))
        return docs
    _text(docs, out, max_steps, width, warnings, after_text)
    return docs


def _text(docs: list[dict[str, Any]], out: str | None, max_steps: int, width: int | None, warnings: bool,
          after_text: Callable[[Console], None] | None) -> None:
    from traceinsight.report.console import make_console
    from traceinsight.report.text import render_doc

    if out:
        with open(out, "w", encoding="utf-8") as fh:
            con = make_console(file=fh, no_color=True, width=width)
            for d in docs:
                render_doc(d, con, max_steps=max_steps or None)  # a file keeps its warnings in its header
            if after_text:
                after_text(con)
        return
    con = make_console(width=width)
    if len(docs) > 1:
        from traceinsight.report.fleet import unique_names
        from traceinsight.report.text import render_fleet_rows

        render_fleet_rows(unique_names([dict(d["summary"]) for d in docs]), con)
        if after_text:
            after_text(con)
        return
    for d in docs:
        render_doc(d, con, max_steps=max_steps or None, warnings=warnings)
