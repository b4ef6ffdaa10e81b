"""The Python API: `traceinsight.open(paths, meta=..., ncu=...)` analyzes traces as `traceinsight analyze` does (the
command calls it) and hands the result over as tables, for notebooks and scripts.

    >>> import traceinsight as ti
    >>> a = ti.open("trace.pt.trace.json.gz", meta="trace.meta.json.gz")       # doctest: +SKIP
    >>> a.findings[["severity", "rule_id", "saving_ns"]]                      # doctest: +SKIP
    >>> a.sql("select phase, count(*) from steps group by phase")             # doctest: +SKIP

Tables come out as pandas DataFrames (`.steps`, `.kernels`, `.attention_launches`, `.findings`, `.rule_checks`,
`.sql(query)`) or Arrow tables (`.arrow(name)`); their columns are documented in docs/SCHEMA.md. Calling the API
changes nothing process-wide (`traceinsight.tuning`: that is the command's choice)."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceinsight.errors import InputError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from traceinsight.diagnose.context import TraceAnalysis
    from traceinsight.diagnose.explain import StepExplanation
    from traceinsight.diagnose.whatif import StepReplay
    from traceinsight.ingest.store import TraceDB
    from traceinsight.report.saved import Saved

PathLike = str | os.PathLike[str]
Paths = PathLike | Sequence[PathLike]
# The formats of `Analysis.report` (the `analyze --format` choices that are one text).
REPORT_FORMATS = ("text", "json", "html")


def _paths(given: Paths | None) -> list[Path]:
    if given is None:
        return []
    if isinstance(given, str | os.PathLike):
        return [Path(given)]
    return [Path(p) for p in given]


def open(  # noqa: A001 - `traceinsight.open`, as `duckdb.connect` / `pyarrow.parquet.read_table` name theirs
    paths: Paths,
    meta: Paths | None = None,
    ncu: Paths | None = None,
    step_pattern: str | None = None,
    cache: bool | None = None,
    diagnostics: bool = True,
) -> Analysis:
    """Analyze the traces at `paths` (files, folders searched recursively, or globs; each its own trace) as
    `traceinsight analyze` does: sidecars (`meta`: the collectors' sidecar, `*.meta.json[.gz]`, or FlashInfer's
    API log) and Nsight Compute CSVs (`ncu`) attach to the first trace; `step_pattern` (a regular expression) takes
    only the ranges it matches as steps; `cache` (None: the default of $TRACEINSIGHT_CACHE) reuses the ingest cache
    of an unchanged file; `diagnostics` False skips the rules (no findings: steps, model and replays only). Bad
    input raises `traceinsight.errors.TraceInsightError` (one line, as the command says it)."""
    from traceinsight.ingest.paths import expand_paths
    from traceinsight.pipeline import analyze

    traces = expand_paths(_paths(paths))
    db, analyses = analyze(traces, meta=_paths(meta), ncu=_paths(ncu), step_pattern=step_pattern, cache=cache,
                           diagnostics=diagnostics)
    return Analysis(db, analyses)


class Analysis:
    """The analysis of one or more traces: the tables of its DuckDB database (docs/SCHEMA.md), the steps'
    explanations and replays, and its reports. Every table has a `trace_id` column (`.traces` names them); the
    methods that take a step read the first trace unless `trace` says which. `close()` (or a `with` block) frees
    its database."""

    def __init__(self, db: TraceDB, analyses: list[TraceAnalysis]) -> None:
        self.db = db
        # The analysis objects, one per trace, as the pipeline returns them (`traceinsight.pipeline.analyze`).
        self.analyses = analyses
        self._tables_written = False
        self._labels_written = False

    # ---------------------------------------------------------------- tables
    def documents(self) -> Saved:
        """Where the reports read the analysis from (`traceinsight.report.saved`, the one document builder): its
        analysis tables, written into the database once, when first asked for."""
        from traceinsight.report.saved import of_analyses

        if not self._tables_written:
            from traceinsight.report.tables import write_tables

            write_tables(self.db, self.analyses)
            self._tables_written = True
        return of_analyses(self.db.con, self.analyses)

    def _tables(self) -> None:
        """The analysis tables (steps, findings, ...) and the kernel labels written into the database, once."""
        self.documents()
        if not self._labels_written:
            from traceinsight.model.kernel_table import ensure_labels

            ensure_labels(self.db)
            self._labels_written = True

    def _query(self, query: str, params: dict[str, Any] | None = None) -> Any:
        self._tables()
        return self.db.con.sql(query, params=params or None)

    def arrow(self, name: str) -> pa.Table:
        """The table `name` as an Arrow table: an analysis table (steps, step_breakdown, attention_launches,
        launch_models, findings, rule_checks, analyses) or a trace table (traces, devices, kernels, kernel_labels,
        launches, ranges, memops, ncu_kernels, ncu_metrics, batches)."""
        if name not in self.table_names():
            raise InputError(f"no table {name!r} (tables: {', '.join(self.table_names())})")
        return self._query(f'SELECT * FROM "{name}"').to_arrow_table()

    def table_names(self) -> list[str]:
        """The tables `arrow` and `sql` read."""
        self._tables()
        rows = self.db.con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
                                   "UNION ALL SELECT view_name FROM duckdb_views() WHERE database_name = "
                                   "current_database() AND NOT internal ORDER BY 1").fetchall()
        return [r[0] for r in rows]

    def sql(self, query: str, params: dict[str, Any] | None = None) -> pd.DataFrame:
        """The result of `query` (DuckDB SQL, `$name` parameters from `params`) on the tables, as a DataFrame."""
        return self._query(query, params).df()

    def _frame(self, name: str, order: str) -> pd.DataFrame:
        return self.sql(f'SELECT * FROM "{name}" ORDER BY {order}')

    @property
    def traces(self) -> pd.DataFrame:
        """One row per trace: its id, path, format, GPU span."""
        return self._frame("traces", "trace_id")

    @property
    def steps(self) -> pd.DataFrame:
        """One row per step (an engine iteration, a profiler step, or an attention launch): its time, wall time,
        attention time, phase, split-KV state and time breakdown window."""
        return self._frame("steps", "trace_id, step")

    @property
    def kernels(self) -> pd.DataFrame:
        """One row per kernel execution, with its label: family, backend, short name, phase (and the evidence),
        the labelling rule and the template parameters read from its name."""
        return self.sql("SELECT k.*, l.family, l.backend, l.kernel, l.phase, l.phase_evidence, l.rule, l.params_json "
                        "FROM kernels k LEFT JOIN kernel_labels l USING (name) ORDER BY k.trace_id, k.kernel_id")

    @property
    def attention_launches(self) -> pd.DataFrame:
        """One row per attention launch of a step: its kernel, backend, grid, split-KV state, the merge / prepare
        kernels attached to it and what was measured."""
        return self._frame("attention_launches", "trace_id, step, kernel_id")

    @property
    def findings(self) -> pd.DataFrame:
        """One row per finding, in report order (most severe, then largest saving, first): rule, severity, steps,
        evidence, explanation, remedy, estimated saving and the root cause it is evidence of."""
        return self._frame("findings", "trace_id, finding")

    @property
    def rule_checks(self) -> pd.DataFrame:
        """One row per rule and trace: fired, passed or not applicable (with the reason)."""
        return self._frame("rule_checks", "trace_id, rule_id")

    # ---------------------------------------------------------------- one step
    def _trace(self, trace: int | None) -> TraceAnalysis:
        if not self.analyses:
            raise InputError("no trace was analyzed")
        if trace is None:
            return self.analyses[0]
        for a in self.analyses:
            if a.trace_id == trace:
                return a
        raise InputError(f"no trace {trace} (trace ids: {', '.join(str(a.trace_id) for a in self.analyses)})")

    def explain(self, step: int | None = None, trace: int | None = None) -> StepExplanation:
        """Why `step` took what it took (default: the step whose time grew most over its baseline): its breakdown
        beside the steps around it, the parts that grew, the kernels and host operations behind them, the cause
        and the remedy (`traceinsight explain`). `.to_json()` gives it as a dict."""
        from traceinsight.diagnose.explain import explain_step
        from traceinsight.diagnose.rules.latency_spike import attributions

        a = self._trace(trace)
        if not a.steps:
            raise InputError(f"{a.path}: no decode steps found (no attention kernel launches)")
        table = attributions(a)
        if step is None:
            step = max(table.values(), key=lambda x: x.excess_ns).step
        elif step not in table:
            raise InputError(f"{a.path}: no step {step} (the trace has {len(a.steps)} steps, 0..{len(a.steps) - 1})")
        return explain_step(a, step)

    def whatif(self, step: int | None = None, all_steps: bool = False, trace: int | None = None) -> list[StepReplay]:
        """Replay steps' batches through the alternatives (split-KV kept on, FA3's dynamic split, the other decode
        paths, the batch capped at B_th - 1), each with its predicted time (`traceinsight whatif`): `step`, every
        replayable step (`all_steps`), or by default the one with the longest attention launch. Needs the steps'
        batch compositions (a sidecar given as `meta`)."""
        from traceinsight.diagnose.whatif import replay_step, replayable_steps

        a = self._trace(trace)
        if step is not None and all_steps:
            raise InputError(f"{a.path}: a step and all_steps exclude each other")
        known = replayable_steps(a.schedule, a.steps)
        by_index = a.steps_by_index()
        sidecar = "pass --meta SIDECAR (meta= in Python)"
        if step is not None:
            if step not in by_index:
                raise InputError(f"{a.path}: no step {step} (the trace has {len(a.steps)} steps, "
                                 f"0..{len(a.steps) - 1})")
            if step not in known:
                raise InputError(f"{a.path}: step {step} has no known batch composition (KV lengths): {sidecar}")
            chosen = [step]
        elif not known:
            raise InputError(f"{a.path}: no step has a known batch composition (KV lengths): {sidecar}")
        elif all_steps:
            chosen = known
        else:
            chosen = [max(known, key=lambda i: by_index[i].launches[0].attention.dur_ns)]
        assert a.schedule is not None  # known steps have a batch, so the model ran
        return [replay_step(a.schedule, by_index[i]) for i in chosen]

    # ---------------------------------------------------------------- out
    def report(self, format: str = "text", width: int = 120, max_steps: int | None = 40) -> str:  # noqa: A002
        """The report `traceinsight analyze --format FORMAT` writes: 'text' (`width` columns, at most `max_steps`
        steps listed, None for all; without colour), 'json' (schema traceinsight.analysis/1, the steps that
        matter) or 'html' (self-contained). Markdown has figures beside it: `write_report`."""
        if format == "json":
            from traceinsight.report.saved import write_documents

            buf = io.BytesIO()
            write_documents(self.documents(), buf)
            return buf.getvalue().decode("utf-8")
        if format == "html":
            from traceinsight.report.files import render_report

            return render_report(self.documents(), "html", Path("report.html"))
        if format == "text":
            from traceinsight.report.console import make_console
            from traceinsight.report.json_doc import STEPS_ALL
            from traceinsight.report.saved import document
            from traceinsight.report.text import render_doc

            out = io.StringIO()
            console = make_console(file=out, no_color=True, width=width)
            src = self.documents()
            for a in self.analyses:
                render_doc(document(src, a.trace_id, STEPS_ALL), console, max_steps=max_steps)
            return out.getvalue()
        raise ValueError(f"unknown report format {format!r} (one of {', '.join(REPORT_FORMATS)}; "
                         "Markdown: write_report)")

    def write_report(self, out: PathLike, format: str | None = None) -> Path:  # noqa: A002
        """Write the 'html' or 'md' report (default: told by `out`'s suffix) to `out`; Markdown's figures go into
        `<stem>_figs/` beside it. Returns the path."""
        from traceinsight.report.files import write_report

        path = Path(out)
        return write_report(self.documents(), format or path.suffix.lstrip(".").replace("markdown", "md"), path)

    def save(self, folder: PathLike, no_cache: bool = False) -> Path:
        """Save the analysis as a Parquet dataset in `folder` (what `analyze --save` writes): `traceinsight report
        FOLDER` renders it again without the traces; DuckDB and `traceinsight sql` query it. Returns the folder."""
        from traceinsight.ingest.parquet import export_parquet

        self._tables()
        out = Path(folder)
        export_parquet(self.db, [a.trace_id for a in self.analyses], out,
                       options={"no_cache": no_cache, "analysis": True})
        return out

    def close(self) -> None:
        """Free the database (the tables and frames already handed out stay valid)."""
        self.db.close()

    def __enter__(self) -> Analysis:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        names = ", ".join(Path(a.path).name for a in self.analyses[:3]) + (", ..." if len(self.analyses) > 3 else "")
        steps = sum(len(a.steps) for a in self.analyses)
        findings = sum(len(a.findings) for a in self.analyses)
        return f"<traceinsight.Analysis of {names}: {steps} steps, {findings} findings>"
