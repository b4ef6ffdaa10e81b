"""The report of saved analysis tables written as `analyze` writes it: what `traceinsight report SAVED` prints, and
what `analyze` prints from an analysis it kept (cli/analysis_cache.py). Not a command: shared by both."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traceinsight.report.saved import Saved


def emit(src: Saved, fmt: str, out: str | None, steps: str, max_steps: int, width: int | None,
         warnings: bool = True) -> list[dict[str, Any]]:
    """Write the report of every trace of `src` as `analyze` writes it (text on stdout shows the traces' warnings
    in its header unless `warnings` is False: `analyze` writes them on stderr); return the documents (their
    findings at least, for --fail-on)."""
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
    _render(src, ids, docs, fmt, out, max_steps, width, warnings)
    return docs


def _render(src: Saved, ids: list[int], docs: list[dict[str, Any]], fmt: str, out: str | None, max_steps: int,
            width: int | None, warnings: bool) -> None:
    if fmt in ("md", "html"):
        from traceinsight.report import saved as saved_tables
        from traceinsight.report.files import render_documents, write_documents_report

        gantts = [saved_tables.gantt(src, i, d) for i, d in zip(ids, docs, strict=True)]
        if out:
            write_documents_report(docs, gantts, fmt, Path(out))
        else:
            sys.stdout.write(render_documents(docs, gantts, fmt, Path("report.html")))
        return
    from traceinsight.report.text import make_console, render_doc, render_fleet_rows

    if out:
        with open(out, "w", encoding="utf-8") as fh:
            con = make_console(file=fh, no_color=True, width=width)
            for d in docs:
                render_doc(d, con, max_steps=max_steps or None)
        return
    con = make_console(width=width)
    if len(docs) > 1:
        from traceinsight.report.fleet import unique_names

        render_fleet_rows(unique_names([dict(d["summary"]) for d in docs]), con)
        return
    for d in docs:
        render_doc(d, con, max_steps=max_steps or None, warnings=warnings)
