"""The analysis as tables: one trace's steps, their breakdowns, attention launches, launch models, findings and
rule checks, written into its DuckDB database (the tables of `ingest/schema.sql` below "The analysis as tables";
docs/SCHEMA.md). `traceinsight sql` queries them and `export --parquet --analysis` writes them out: the same
numbers the JSON document holds, in rows (tests/test_tables.py holds the two together)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson
import pyarrow as pa

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.ingest.schema import analysis_table_names
from traceinsight.ingest.schema import mentions_analysis as mentions_analysis  # `sql` asks it without pyarrow
from traceinsight.ingest.store import TraceDB
from traceinsight.report import json_doc

# The tables this module fills (schema.sql's analysis tables), in the order they are written.
ANALYSIS_TABLES = analysis_table_names()


def _step_rows(a: TraceAnalysis) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {c: [] for c in (
        "trace_id", "step", "name", "source", "range_id", "phase", "split_kv", "start_ns", "dur_ns", "attention_ns",
        "kernel_count", "wall_ns", "window_start_ns", "window_end_ns", "window_source", "host_gap_max_ns",
        "host_long_ns", "host_range_ns", "idle_stretches", "host_gaps", "batch_json")}
    batches = a.schedule.batches if a.schedule is not None else {}
    for s in a.steps:
        b = s.breakdown
        batch = batches.get(s.index)
        for c, v in (("trace_id", a.trace_id), ("step", s.index), ("name", s.name), ("source", s.source),
                     ("range_id", s.range_id), ("phase", s.phase), ("split_kv", s.split_kv),
                     ("start_ns", s.start_ns), ("dur_ns", s.dur_ns), ("attention_ns", s.attention_ns),
                     ("kernel_count", s.kernel_count), ("wall_ns", s.wall_ns),
                     ("window_start_ns", b.start_ns if b else None), ("window_end_ns", b.end_ns if b else None),
                     ("window_source", b.source if b else None), ("host_gap_max_ns", b.host_gap_max_ns if b else None),
                     ("host_long_ns", b.host_long_ns if b else None),
                     ("host_range_ns", b.host_range_ns if b else None),
                     ("idle_stretches", b.idle_stretches if b else None),
                     ("host_gaps", [list(g) for g in b.host_gaps] if b else None),
                     ("batch_json", _json(batch.to_json()) if batch is not None else None)):
            cols[c].append(v)
    return cols


def _breakdown_rows(a: TraceAnalysis) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {"trace_id": [], "step": [], "component": [], "ns": []}
    for s in a.steps:
        if s.breakdown is None:
            continue
        for comp, ns in s.breakdown.components.items():
            cols["trace_id"].append(a.trace_id)
            cols["step"].append(s.index)
            cols["component"].append(comp)
            cols["ns"].append(ns)
    return cols


def _launch_rows(a: TraceAnalysis) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {c: [] for c in (
        "trace_id", "step", "kernel_id", "kernel", "backend", "phase", "phase_evidence", "split_kv", "split_evidence",
        "start_ns", "dur_ns", "merge_kernel_ids", "merge_ns", "prepare_kernel_ids", "prepare_ns",
        "tile_padding_share", "launch", "name", "family", "params_json", "grid", "block", "registers_per_thread",
        "smem_bytes", "stream", "merges_json", "prepares_json", "tiles_json", "ncu_id", "sm_active_min",
        "sm_active_avg", "sm_active_max")}
    measured = a.schedule.measured if a.schedule is not None else {}
    for s in a.steps:
        for j, x in enumerate(s.launches):
            k = x.attention
            meas = measured.get(k.kernel_id)
            for c, v in (("trace_id", a.trace_id), ("step", s.index), ("kernel_id", k.kernel_id),
                         ("kernel", k.kernel), ("backend", k.backend), ("phase", x.phase),
                         ("phase_evidence", x.phase_evidence), ("split_kv", x.split_kv),
                         ("split_evidence", x.split_evidence), ("start_ns", k.start_ns), ("dur_ns", k.dur_ns),
                         ("merge_kernel_ids", [m.kernel_id for m in x.merges]),
                         ("merge_ns", sum(m.dur_ns for m in x.merges)),
                         ("prepare_kernel_ids", [p.kernel_id for p in x.prepares]),
                         ("prepare_ns", sum(p.dur_ns for p in x.prepares)),
                         ("tile_padding_share", x.tiles["padding_share"] if x.tiles else None),
                         ("launch", j), ("name", k.name), ("family", k.family), ("params_json", _json(k.params)),
                         ("grid", list(k.grid)), ("block", list(k.block)),
                         ("registers_per_thread", k.registers_per_thread), ("smem_bytes", k.smem_bytes),
                         ("stream", k.stream_id), ("merges_json", _json(_attached(x.merges))),
                         ("prepares_json", _json(_attached(x.prepares))),
                         ("tiles_json", _json(x.tiles) if x.tiles is not None else None),
                         ("ncu_id", meas.ncu_id if meas else None),
                         ("sm_active_min", meas.sm_active_min if meas else None),
                         ("sm_active_avg", meas.sm_active_avg if meas else None),
                         ("sm_active_max", meas.sm_active_max if meas else None)):
                cols[c].append(v)
    return cols


def _model_rows(a: TraceAnalysis) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {c: [] for c in (
        "trace_id", "kernel_id", "source", "work_items", "chunk_tokens", "split_kv", "predicted_ns", "sm_idle",
        "tail_ns", "balanced_ns", "grid_matches", "longest_item_tokens", "measured_sm_idle", "note")}
    sched = a.schedule
    if sched is None:
        return cols
    for kid, m in sorted(sched.models.items()):
        meas = sched.measured.get(kid)
        for c, v in (("trace_id", a.trace_id), ("kernel_id", kid), ("source", m.source),
                     ("work_items", m.work_items), ("chunk_tokens", m.chunk_tokens), ("split_kv", m.split_kv),
                     ("predicted_ns", m.predicted_ns), ("sm_idle", m.sm_idle), ("tail_ns", m.tail_ns),
                     ("balanced_ns", m.balanced_ns), ("grid_matches", m.grid_matches),
                     ("longest_item_tokens", m.longest_item_tokens),
                     ("measured_sm_idle", meas.sm_idle if meas is not None else None), ("note", m.note)):
            cols[c].append(v)
    return cols


def _finding_rows(a: TraceAnalysis) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {c: [] for c in (
        "trace_id", "finding", "rule_id", "severity", "steps", "summary", "cause", "saving_ns", "evidence_json",
        "remedy", "explanation", "ref", "supports", "related", "attributed_saving_ns", "saving_basis")}
    for i, f in enumerate(a.findings):
        j = f.to_json()
        for c, v in (("trace_id", a.trace_id), ("finding", i), ("rule_id", j["id"]), ("severity", j["severity"]),
                     ("steps", j["steps"]), ("summary", j["summary"]), ("cause", j["evidence"].get("cause")),
                     ("saving_ns", j["saving_ns"]), ("evidence_json", orjson.dumps(j["evidence"]).decode()),
                     ("remedy", j["remedy"]), ("explanation", j["explanation"]), ("ref", j["ref"]),
                     ("supports", j["supports"]), ("related", j["related"]),
                     ("attributed_saving_ns", j["attributed_saving_ns"]), ("saving_basis", j["saving_basis"])):
            cols[c].append(v)
    return cols


def _check_rows(a: TraceAnalysis) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {c: [] for c in ("trace_id", "rule_id", "name", "status", "reason", "findings")}
    for c in a.checks:
        j = c.to_json()
        for col, v in (("trace_id", a.trace_id), ("rule_id", j["id"]), ("name", j["name"]), ("status", j["status"]),
                       ("reason", j["reason"]), ("findings", j["findings"])):
            cols[col].append(v)
    return cols


def _analysis_rows(a: TraceAnalysis) -> dict[str, list[Any]]:
    """The document's trace-level sections (json_doc's, without steps, findings and checks: their own tables)."""
    from traceinsight.report.gantt import stored_gantt

    doc = json_doc.trace_sections(a)
    t = doc["trace"]
    row = {"trace_id": a.trace_id, "analyzer": doc["tool"]["version"], "path": t["path"], "format": t["format"],
           "format_version": t["format_version"], "tool_version": t["tool_version"], "gpu_json": _json(t["gpu"]),
           "start_ns": t["start_ns"], "end_ns": t["end_ns"], "dur_ns": t["dur_ns"], "warnings": list(t["warnings"]),
           "families_json": _json(doc["families"]), "kernels_json": _json(doc["kernels"]),
           "thresholds_json": _json(doc["thresholds"]), "summary_json": _json(doc["summary"]),
           "step_summary_json": _json(doc["step_summary"]), "savings_json": _json(doc["savings"]),
           "model_json": _json(doc["model"]), "extra_json": _json(a.extra),
           "gantt_json": stored_gantt(a)}
    return {c: [v] for c, v in row.items()}


def _attached(kernels: Sequence[Any]) -> list[dict[str, Any]]:
    """Merge or prepare kernels as the document lists them."""
    return [{"kernel": m.kernel, "grid": list(m.grid), "dur_ns": m.dur_ns} for m in kernels]


def _json(v: Any) -> str:
    return orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS).decode()


BUILDERS = {"steps": _step_rows, "step_breakdown": _breakdown_rows, "attention_launches": _launch_rows,
            "launch_models": _model_rows, "findings": _finding_rows, "rule_checks": _check_rows,
            "analyses": _analysis_rows}


def write_tables(db: TraceDB, analyses: Iterable[TraceAnalysis], into: str | None = None) -> None:
    """Write (or rewrite) the analysis tables of these analyses into `db`, typed by schema.sql; `into`: into the
    tables of that attached database instead (which must have them), one table at a time."""
    prefix = f"{into}." if into else ""
    for a in analyses:
        for name in ANALYSIS_TABLES:
            db.con.execute(f"DELETE FROM {prefix}{name} WHERE trace_id = ?", [a.trace_id])
            cols = BUILDERS[name](a)
            if not cols["trace_id"]:
                continue
            rows = pa.table(cols)  # noqa: F841 (scanned by name below)
            db.con.execute(f"INSERT INTO {prefix}{name} BY NAME SELECT * FROM rows")
