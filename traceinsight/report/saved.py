"""The one document builder: the JSON document of an analysis (`traceinsight.analysis/1`) read from the analysis
tables `report/tables.py` writes. Every report renders from it: `analyze` (its tables written into its own
database a moment before: `of_analyses`), the Python API, the dashboard, and `traceinsight report SAVED`, which
renders the text, JSON, Markdown and HTML reports of a trace analyzed once without analyzing it again.

SAVED is a Parquet dataset holding the analysis tables (`traceinsight export --parquet DIR --analysis`, or a
`traceinsight fleet analyze` output folder) or a DuckDB database file holding them. `open_saved` loads the tables
of the traces asked for into an in-memory DuckDB database (a dataset's trace keys become trace ids 0..);
`document` selects one trace's document from it: the trace-level sections from `analyses` (built from the analysis
by `json_doc.trace_sections` when the tables were written), the steps, launches, models, findings and checks from
their own tables, the steps that matter (`json_doc.pick_steps`) unless every step is asked for.
tests/test_golden.py holds every golden case's document read back from a saved dataset equal to the one `analyze`
writes; tests/test_saved_report.py the `report` command's outputs equal to `analyze`'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from traceinsight.components import IDLE
from traceinsight.diagnose.finding import saving_split
from traceinsight.errors import InputError
from traceinsight.ingest.schema import analysis_table_names, schema_sql
from traceinsight.report import json_doc
from traceinsight.report.fleet import fleet_findings, unique_names

if TYPE_CHECKING:
    from traceinsight.diagnose.context import TraceAnalysis
    from traceinsight.report.figures import Gantt

PARQUET_SCHEMAS = ("traceinsight.parquet/1", "traceinsight.fleet/1")


@dataclass
class Saved:
    """Analysis tables loaded from SAVED: `con` (DuckDB, tables with trace_id), the traces' names by trace id."""

    con: Any
    source: Path
    names: dict[int, str] = field(default_factory=dict)


def of_analyses(con: Any, analyses: list[TraceAnalysis]) -> Saved:
    """The documents of analyses made in this process, from their analysis tables already written on `con`
    (`tables.write_tables` into their own database: `traceinsight.api.Analysis.documents`)."""
    return Saved(con, Path(analyses[0].path) if analyses else Path(), {a.trace_id: Path(a.path).name for a in analyses})


def in_memory(analyses: list[TraceAnalysis]) -> Saved:
    """The documents of analyses made in this process whose database is gone or not at hand: their analysis tables
    written into a new in-memory DuckDB database."""
    import duckdb

    from traceinsight.ingest.schema import analysis_schema_sql
    from traceinsight.report.tables import write_tables_on

    con = duckdb.connect()
    con.execute(analysis_schema_sql())
    write_tables_on(con, analyses)
    return of_analyses(con, analyses)


def document_of(a: TraceAnalysis, steps: str = json_doc.STEPS_ALL) -> dict[str, Any]:
    """The document of one analysis (`in_memory`), every step or the steps that matter."""
    return document(in_memory([a]), a.trace_id, steps)


def _sql_text(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def is_saved_folder(path: Path) -> bool:
    """A folder of saved analyses: a dataset (manifest.json) with the `analyses` table."""
    return path.is_dir() and (path / "manifest.json").is_file() and (path / "analyses").is_dir()


def dataset_keys(path: Path) -> list[str]:
    """The trace keys of a Parquet dataset whose `analyses` table has a partition."""
    return sorted(p.name.split("=", 1)[1] for p in (path / "analyses").glob("trace=*") if p.is_dir())


def open_saved(path: Path, traces: tuple[str, ...] = ()) -> Saved:
    """Load the analysis tables of SAVED (a dataset folder or a DuckDB file), only of `traces` (keys of a dataset,
    or paths / file names of the traces) when given. InputError when SAVED holds no analysis."""
    import duckdb

    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    con = duckdb.connect()
    con.execute(schema_sql())
    saved = Saved(con, path)
    if path.is_dir():
        _load_dataset(saved, path, traces)
    else:
        _load_database(saved, path, traces)
    if not saved.names:
        want = f" for {', '.join(traces)}" if traces else ""
        raise InputError(f"{path}: no saved analysis{want} (save one with `traceinsight export --parquet DIR "
                         "--analysis` or `traceinsight fleet analyze`)")
    return saved


def _load_dataset(saved: Saved, path: Path, traces: tuple[str, ...]) -> None:
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError):
        raise InputError(f"{path}: not a traceinsight dataset (no readable manifest.json)") from None
    if not isinstance(manifest, dict) or manifest.get("schema") not in PARQUET_SCHEMAS:
        raise InputError(f"{path}: manifest.json is not a traceinsight dataset's "
                         f"(schema {manifest.get('schema') if isinstance(manifest, dict) else None!r})")
    keys = dataset_keys(path)
    if traces:
        keys = [k for k in keys if _matches(k, manifest, traces)]
    for i, key in enumerate(keys):
        saved.names[i] = key
        for table in analysis_table_names():
            part = path / table / f"trace={key}"
            files = sorted(part.glob("*.parquet"))
            if not files:
                continue
            listed = "[" + ", ".join(_sql_text(str(f)) for f in files) + "]"
            saved.con.execute(f"INSERT INTO {table} BY NAME SELECT {i} AS trace_id, * "
                              f"FROM read_parquet({listed}, union_by_name = true, hive_partitioning = false)")


def _matches(key: str, manifest: dict[str, Any], traces: tuple[str, ...]) -> bool:
    entries = manifest.get("traces") or []  # both manifests: {"trace": key, "path" | "source": the input}
    sources = [e for e in entries if isinstance(e, dict) and e.get("trace") == key]
    names = {key} | {str(e.get(f)) for e in sources for f in ("path", "source") if e.get(f)}
    names |= {Path(n).name for n in names}
    return any(t in names for t in traces)


def _load_database(saved: Saved, path: Path, traces: tuple[str, ...]) -> None:
    import duckdb

    con = saved.con
    try:
        con.execute(f"ATTACH {_sql_text(str(path))} AS saved_db (READ_ONLY)")
    except (duckdb.Error, OSError) as exc:
        raise InputError(f"{path}: not a DuckDB database ({str(exc).splitlines()[0]})") from None
    try:
        have = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                          "WHERE table_catalog = 'saved_db'").fetchall()}
        if "analyses" not in have:
            return
        rows = con.execute("SELECT trace_id, path FROM saved_db.analyses ORDER BY trace_id").fetchall()
        ids = [tid for tid, p in rows if not traces or p in traces or Path(p).name in traces]
        saved.names = {tid: Path(p).name for tid, p in rows if tid in ids}
        for table in analysis_table_names():
            if table in have and ids:
                con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM saved_db.{table} "
                            f"WHERE trace_id IN ({', '.join(map(str, ids))})")
    finally:
        con.execute("DETACH saved_db")


def _rows(con: Any, query: str, params: list[Any]) -> list[dict[str, Any]]:
    cur = con.execute(query, params)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def _loads(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)


def _round(v: float | None) -> float | None:
    return round(v, 4) if v is not None else None


def document(saved: Saved, trace_id: int, steps: str = json_doc.STEPS_SELECTED) -> dict[str, Any]:
    """The JSON document of trace `trace_id` as `analyze --format json [--steps all]` writes it."""
    doc = _sections(saved, trace_id, steps)
    doc["steps"] = list(_steps(saved, trace_id, _selected(saved, trace_id, doc) if steps != json_doc.STEPS_ALL
                               else None))
    return doc


def _sections(saved: Saved, trace_id: int, steps: str) -> dict[str, Any]:
    con = saved.con
    (a,) = _rows(con, "SELECT * FROM analyses WHERE trace_id = ?", [trace_id])
    findings = [{"id": f["rule_id"], "severity": f["severity"], "steps": list(f["steps"] or []),
                 "summary": f["summary"], "evidence": _loads(f["evidence_json"]) or {}, "remedy": f["remedy"],
                 "saving_ns": f["saving_ns"], "explanation": f["explanation"], "ref": f["ref"],
                 "supports": f["supports"], "related": list(f["related"] or []),
                 "attributed_saving_ns": f["attributed_saving_ns"], "saving_basis": f["saving_basis"],
                 **saving_split(f["attributed_saving_ns"], f["saving_basis"])}
                for f in _rows(con, "SELECT * FROM findings WHERE trace_id = ? ORDER BY finding", [trace_id])]
    checks = [{"id": c["rule_id"], "name": c["name"], "status": c["status"], "reason": c["reason"],
               "findings": c["findings"]}
              for c in _rows(con, "SELECT * FROM rule_checks WHERE trace_id = ?", [trace_id])]
    return {
        "schema": json_doc.SCHEMA,
        "tool": {"name": "traceinsight", "version": a["analyzer"]},
        "trace": {"path": a["path"], "format": a["format"], "format_version": a["format_version"],
                  "tool_version": a["tool_version"], "gpu": _loads(a["gpu_json"]), "start_ns": a["start_ns"],
                  "end_ns": a["end_ns"], "dur_ns": a["dur_ns"], "warnings": list(a["warnings"] or [])},
        "families": _loads(a["families_json"]),
        "kernels": _loads(a["kernels_json"]),
        "thresholds": _loads(a["thresholds_json"]),
        "summary": _loads(a["summary_json"]),
        "step_summary": _loads(a["step_summary_json"]),
        "steps_included": steps,
        "steps": [],
        "findings": findings,
        "savings": _loads(a["savings_json"]),
        "checks": checks,
        "model": _loads(a["model_json"]),
        "sweep": _loads(a["sweep_json"]) if a.get("sweep_json") is not None else _sweep(saved, trace_id),
        **(_loads(a["extra_json"]) or {}),
    }


def _sweep(saved: Saved, trace_id: int) -> list[dict[str, Any]]:
    """The sweep's panels of an analysis saved before the `analyses` table kept them, from its steps and launches
    (`model.sweep.sweep_panels`, as the analysis computes them)."""
    from traceinsight.model.sweep import sweep_panels

    con = saved.con
    launches: dict[int, list[tuple[str | None, str | None, bool | None]]] = {}
    for step, kernel, backend, split in con.execute(
            "SELECT step, kernel, backend, split_kv FROM attention_launches WHERE trace_id = ? ORDER BY step, launch",
            [trace_id]).fetchall():
        launches.setdefault(step, []).append((kernel, backend, split))
    steps = con.execute("SELECT step, name, attention_ns FROM steps WHERE trace_id = ? ORDER BY step",
                        [trace_id]).fetchall()
    (row,) = con.execute("SELECT thresholds_json FROM analyses WHERE trace_id = ?", [trace_id]).fetchall()
    return [p.to_json() for p in sweep_panels(((name, att, launches.get(i, [])) for i, name, att in steps),
                                              _loads(row[0]) or [])]


def _selected(saved: Saved, trace_id: int, doc: dict[str, Any]) -> list[int]:
    """The steps that matter (`json_doc.pick_steps`), picked from the tables (queries/finding_steps.sql): no
    Python value per step of the trace."""
    from traceinsight.queries import sql

    con = saved.con
    slowest = [i for (i,) in con.execute(
        "SELECT step FROM steps WHERE trace_id = ? ORDER BY wall_ns DESC, step LIMIT ?",
        [trace_id, json_doc.SLOWEST_STEPS]).fetchall()]
    per_finding = [i for (i,) in con.execute(sql("finding_steps"), {
        "trace": trace_id, "per": json_doc.STEPS_PER_FINDING}).fetchall()]

    def known(steps: list[int]) -> set[int]:
        return {i for (i,) in con.execute("SELECT step FROM steps WHERE trace_id = ? AND step IN "
                                          "(SELECT unnest(?::BIGINT[]))", [trace_id, steps]).fetchall()}

    return json_doc.pick_steps(slowest, per_finding, (f["evidence"] for f in doc["findings"]), known)


def _steps(saved: Saved, trace_id: int, only: list[int] | None) -> Iterator[dict[str, Any]]:
    """The steps' documents in step order (all, or the steps `only`)."""
    con = saved.con

    def where(alias: str = "") -> str:
        pick = "" if only is None else f" AND {alias}step IN (SELECT unnest(?::INTEGER[]))"
        return f"{alias}trace_id = ?{pick}"

    params: list[Any] = [trace_id] if only is None else [trace_id, only]
    parts: dict[int, list[tuple[str, int]]] = {}
    for step, comp, ns in con.execute(f"SELECT step, component, ns FROM step_breakdown WHERE {where()} "
                                      "ORDER BY step, ns DESC, component", params).fetchall():
        parts.setdefault(step, []).append((comp, ns))
    launches: dict[int, list[dict[str, Any]]] = {}
    for r in _rows(con, "SELECT l.*, m.source AS m_source, m.work_items, m.chunk_tokens, m.split_kv AS m_split_kv, "
                        "m.predicted_ns, m.sm_idle, m.tail_ns, m.grid_matches, m.longest_item_tokens, m.balanced_ns, "
                        "m.note FROM attention_launches l LEFT JOIN launch_models m "
                        f"ON m.trace_id = l.trace_id AND m.kernel_id = l.kernel_id WHERE {where('l.')} "
                        "ORDER BY l.step, l.launch", params):
        launches.setdefault(r["step"], []).append(_launch(r))
    for s in _rows(con, f"SELECT * FROM steps WHERE {where()} ORDER BY step", params):
        out = {"index": s["step"], "name": s["name"], "source": s["source"], "start_ns": s["start_ns"],
               "dur_ns": s["dur_ns"], "attention_ns": s["attention_ns"], "kernel_count": s["kernel_count"],
               "split_kv": s["split_kv"], "phase": s["phase"], "wall_ns": s["wall_ns"],
               "breakdown": _breakdown(s, parts.get(s["step"], [])),
               "launches": launches.get(s["step"], [])}
        if s["batch_json"] is not None:
            out["batch"] = orjson.loads(s["batch_json"])
        yield out


def _breakdown(s: dict[str, Any], parts: list[tuple[str, int]]) -> dict[str, Any] | None:
    if s["window_source"] is None:
        return None
    components = dict(parts)
    idle = sum(components.get(k, 0) for k in IDLE)
    return {"wall_ns": s["window_end_ns"] - s["window_start_ns"], "start_ns": s["window_start_ns"],
            "end_ns": s["window_end_ns"], "source": s["window_source"],
            "gpu_busy_ns": sum(v for k, v in components.items() if k not in IDLE), "idle_ns": idle,
            "components": components, "host_range_ns": s["host_range_ns"], "host_gap_max_ns": s["host_gap_max_ns"],
            "host_long_ns": s["host_long_ns"], "idle_stretches": s["idle_stretches"],
            "host_gaps": [list(g) for g in s["host_gaps"] or []]}


def _launch(r: dict[str, Any]) -> dict[str, Any]:
    out = {"kernel": r["kernel"], "name": r["name"], "family": r["family"], "backend": r["backend"],
           "phase": r["phase"], "phase_evidence": r["phase_evidence"], "params": _loads(r["params_json"]),
           "grid": list(r["grid"]), "block": list(r["block"]), "registers_per_thread": r["registers_per_thread"],
           "smem_bytes": r["smem_bytes"], "stream": r["stream"], "start_ns": r["start_ns"], "dur_ns": r["dur_ns"],
           "split_kv": r["split_kv"], "split_evidence": r["split_evidence"], "merges": _loads(r["merges_json"]),
           "prepares": _loads(r["prepares_json"]), "tiles": _loads(r["tiles_json"])}
    if r["m_source"] is not None:
        out["model"] = {"source": r["m_source"], "work_items": r["work_items"], "chunk_tokens": r["chunk_tokens"],
                        "split_kv": r["m_split_kv"], "predicted_ns": r["predicted_ns"], "sm_idle": _round(r["sm_idle"]),
                        "tail_ns": r["tail_ns"], "grid_matches": r["grid_matches"],
                        "longest_item_tokens": r["longest_item_tokens"], "balanced_ns": r["balanced_ns"],
                        "note": r["note"]}
    if r["ncu_id"] is not None:
        from traceinsight.model.schedule import Measured

        out["measured"] = Measured(r["ncu_id"], r["sm_active_min"], r["sm_active_avg"], r["sm_active_max"]).to_json()
    return out


def findings_only(saved: Saved, trace_id: int) -> dict[str, Any]:
    """The severities of a trace's findings, as `{"findings": [{"severity": ...}, ...]}` (for --fail-on)."""
    rows = saved.con.execute("SELECT severity FROM findings WHERE trace_id = ? ORDER BY finding", [trace_id])
    return {"findings": [{"severity": r[0]} for r in rows.fetchall()]}


def gantt(saved: Saved, trace_id: int, doc: dict[str, Any]) -> Gantt | str:
    """The report's Gantt of trace `trace_id` (whose document, with every step, is `doc`), or why there is none."""
    from traceinsight.report.gantt import gantt_from_doc

    # Fetched to the end: an analysis's own connection is shared, and DuckDB refuses other work on it meanwhile.
    rows = saved.con.execute("SELECT gantt_json FROM analyses WHERE trace_id = ?", [trace_id]).fetchall()
    return gantt_from_doc(doc, rows[0][0] if rows else None)


def documents(saved: Saved, steps: str = json_doc.STEPS_SELECTED) -> dict[str, Any]:
    """Every loaded trace's document; several: with the fleet rows, as `analyze --format json` writes them."""
    return _whole([document(saved, tid, steps) for tid in sorted(saved.names)])


def _whole(docs: list[dict[str, Any]]) -> dict[str, Any]:
    if len(docs) == 1:
        return docs[0]
    rows = unique_names([dict(d["summary"]) for d in docs])
    return {"schema": json_doc.MULTI_SCHEMA, "traces": docs,
            "fleet": {"summary": rows, "findings": fleet_findings(rows)}}


def write_documents(saved: Saved, out: IO[bytes], steps: str = json_doc.STEPS_SELECTED) -> None:
    """Write `documents(saved, steps)` to `out` as `analyze --format json` writes it (STEPS_ALL: streamed)."""
    if steps != json_doc.STEPS_ALL:
        out.write(orjson.dumps(documents(saved, steps), option=json_doc.JSON_OPTIONS) + b"\n")
        return
    ids = sorted(saved.names)
    docs = [{**_sections(saved, tid, steps), "steps": json_doc.STEPS_HOLE} for tid in ids]
    json_doc.write_streamed(_whole(docs), [_steps(saved, tid, None) for tid in ids], out)
