"""One trace's analysis as a self-contained job: what a process-pool worker or a Ray task runs.

`run_task(task)` reads the trace (downloading it first when it is a URL), analyzes it exactly as
`traceinsight analyze TRACE --meta SIDECAR` does, and returns everything the dataset keeps of it as values: the
trace's rows of each table (Arrow), its summary row, its reports (bytes). It never raises: a trace that cannot be
read or analyzed returns its error, so one bad file never stops a fleet. Nothing is written here: the
coordinator writes the dataset, so a worker needs no access to the output folder (on a cluster, only to the
inputs).
"""

from __future__ import annotations

import io
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from traceinsight.errors import TraceInsightError

# Tables a fleet dataset holds per trace by default (docs/FLEET.md); `--tables all` adds the normalized ones.
ANALYSIS_TABLES = ("steps", "step_breakdown", "attention_launches", "launch_models", "findings", "rule_checks",
                   "analyses")
DEFAULT_TABLES = ("devices", "kernel_labels", *ANALYSIS_TABLES)
REPORT_FORMATS = ("json", "html")


@dataclass(frozen=True)
class Task:
    """What to analyze and how: the input (a path or URL, and its sidecar), its key in the dataset, the tables
    and reports to return, and the analysis options (as `traceinsight analyze` takes them)."""

    key: str
    source: str
    sidecar: str | None = None
    tables: tuple[str, ...] = DEFAULT_TABLES
    reports: tuple[str, ...] = ("json",)
    step_pattern: str | None = None
    limits: tuple[tuple[str, float], ...] = ()
    cache: bool = True
    timeout_s: float | None = None  # the most one trace may take; None: no limit
    ncu: str | None = None  # the Nsight Compute CSV beside the trace


@dataclass
class Outcome:
    """What a task returns: status 'ok' with the trace's tables, summary and reports, or 'error' with one line."""

    key: str
    status: str
    seconds: float
    worker: str
    error: str | None = None
    tables: dict[str, Any] = field(default_factory=dict)  # table -> pyarrow.Table
    summary: dict[str, Any] = field(default_factory=dict)
    reports: dict[str, bytes] = field(default_factory=dict)  # format -> file content
    warnings: list[str] = field(default_factory=list)


class TaskTimeout(BaseException):
    """Raised in the task's thread when its time is up: a BaseException, so that no `except Exception` in the
    analysis takes it for an error of its own and goes on."""


@contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    """Raise TaskTimeout in this thread after `seconds` (a SIGALRM timer: the main thread of a worker process, a
    Ray worker or the command; elsewhere, or without a limit, nothing is set). Python code is interrupted at once;
    a DuckDB query in progress finishes first."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise TaskTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_task(task: Task) -> Outcome:
    """Analyze one trace (see the module docstring). Never raises, except KeyboardInterrupt/SystemExit."""
    t0 = time.perf_counter()
    worker = f"{socket.gethostname()}:{os.getpid()}"
    try:
        with _deadline(task.timeout_s), _local_files(task) as (trace, sidecar, ncu):
            out = _analyze(task, trace, sidecar, ncu)
    except TaskTimeout:
        return Outcome(task.key, "error", time.perf_counter() - t0, worker,
                       error=f"timed out after {task.timeout_s:g} s (--timeout)")
    except TraceInsightError as exc:
        return Outcome(task.key, "error", time.perf_counter() - t0, worker, error=_line(str(exc)))
    except MemoryError:
        return Outcome(task.key, "error", time.perf_counter() - t0, worker,
                       error="out of memory: raise --memory-limit or use fewer --workers")
    except Exception as exc:  # noqa: BLE001 - recorded as the trace's error; the fleet goes on
        return Outcome(task.key, "error", time.perf_counter() - t0, worker,
                       error=f"internal error: {type(exc).__name__}: {_line(str(exc))}")
    out.seconds = time.perf_counter() - t0
    out.worker = worker
    return out


def _line(text: str) -> str:
    return (text.splitlines() or [""])[0]


def _analyze(task: Task, trace: Path, sidecar: Path | None, ncu: Path | None) -> Outcome:
    from traceinsight.ingest.parquet import partition_query
    from traceinsight.pipeline import analyze
    from traceinsight.report.saved import of_analyses
    from traceinsight.report.tables import write_tables

    db, analyses = analyze([trace], meta=[sidecar] if sidecar else [], ncu=[ncu] if ncu else [],
                           step_pattern=task.step_pattern,
                           limits=dict(task.limits), cache=task.cache)
    try:
        (a,) = analyses
        a.path = task.source  # the name the user gave (a URL stays a URL), not the downloaded copy
        write_tables(db, analyses)
        tables = {t: db.con.sql(partition_query(db, t, a.trace_id)).to_arrow_table() for t in task.tables}
        reports = _reports(of_analyses(db.con, analyses), task.reports)
        summary = summary_row(a)
    finally:
        db.close()
    return Outcome(task.key, "ok", 0.0, "", tables=tables, summary=summary, reports=reports,
                   warnings=list(a.warnings))


def summary_row(a: Any) -> dict[str, Any]:
    """The trace's row of the dataset's `summary` table (`dataset.SUMMARY_SCHEMA`): the figures of a multi-trace
    `analyze` (report/fleet.py) plus the root causes and what they cost, bounded as the report bounds them."""
    from traceinsight.report.fleet import summary_row as figures
    from traceinsight.report.json_doc import savings_summary

    row = figures(a)
    del row["trace"]  # the key is the partition
    row["warning_findings"] = row.pop("warnings")  # there, 'warnings' counts the findings of that severity
    roots = [f for f in a.findings if getattr(f, "supports", None) is None]
    s = savings_summary(a)
    row.update({
        "findings": len(a.findings),
        "root_causes": list(dict.fromkeys(f.id for f in roots)),  # each rule once, most severe first
        "steps_wall_ns": s["steps_wall_ns"],
        "between_steps_ns": s["between_steps_ns"],
        "saving_ns": s["listed_steps_ns"] + s["listed_between_ns"],
        "input_warnings": list(a.warnings),
    })
    return row


def _reports(src: Any, formats: tuple[str, ...]) -> dict[str, bytes]:
    """The per-trace reports of the documents `src` (`report.saved`): the bounded JSON document (docs/JSON.md)
    and the self-contained HTML report."""
    out: dict[str, bytes] = {}
    if "json" in formats:
        from traceinsight.report.saved import write_documents

        buf = io.BytesIO()
        write_documents(src, buf)
        out["json"] = buf.getvalue()
    if "html" in formats:
        from traceinsight.report.files import render_report

        out["html"] = render_report(src, "html", Path("report.html")).encode()
    return out


@contextmanager
def _local_files(task: Task) -> Iterator[tuple[Path, Path | None, Path | None]]:
    """The trace, sidecar and ncu CSV as local files: as they are, or downloaded (fsspec) into a private temporary
    folder that is removed afterwards."""
    from traceinsight.fleet.inputs import is_url

    names = (task.source, task.sidecar, task.ncu)
    if not is_url(task.source):
        yield Path(task.source), *(Path(n) if n else None for n in names[1:])  # type: ignore[misc]
        return
    from traceinsight.fleet.inputs import load_fsspec

    fsspec = load_fsspec()
    with tempfile.TemporaryDirectory(prefix="traceinsight-fleet-") as tmp:
        local: list[Path | None] = []
        for url in names:
            if url is None:
                local.append(None)
                continue
            dest = Path(tmp) / PurePosixPath(url.split("://", 1)[1]).name
            try:
                with fsspec.open(url, "rb") as src, open(dest, "wb") as dst:
                    while chunk := src.read(1 << 22):
                        dst.write(chunk)
            except Exception as exc:  # noqa: BLE001 - a store's errors come in its own types
                from traceinsight.errors import InputError

                raise InputError(f"{url}: cannot download ({type(exc).__name__}: {_line(str(exc))})") from None
            local.append(dest)
        trace, sidecar, ncu = local
        assert trace is not None
        yield trace, sidecar, ncu
