"""The analysis as tables: one trace's steps, their breakdowns, attention launches, launch models, findings and
rule checks, written into its DuckDB database (the tables of `ingest/schema.sql` below "The analysis as tables";
docs/SCHEMA.md). `traceinsight sql` queries them and `export --parquet --analysis` writes them out: the same
numbers the JSON document holds, in rows (tests/test_tables.py holds the two together)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.ingest.arrow_numpy import (
    bool_array,
    dictionary_array,
    float_array,
    int64_array,
    int_array,
    list_array,
    python_array,
    string_array,
    text_array,
)
from traceinsight.ingest.schema import analysis_table_names
from traceinsight.ingest.schema import mentions_analysis as mentions_analysis  # `sql` asks it without pyarrow
from traceinsight.ingest.store import TraceDB
from traceinsight.model.breakdown import StepBreakdown, components_ns
from traceinsight.model.planners.types import gc_paused
from traceinsight.report import json_doc

# The tables this module fills (schema.sql's analysis tables), in the order they are written.
ANALYSIS_TABLES = analysis_table_names()


def _step_rows(a: TraceAnalysis) -> dict[str, pa.Array]:
    steps = a.steps
    n = len(steps)
    batches = a.schedule.batches if a.schedule is not None else {}
    windows = [s.breakdown for s in steps]
    with_window = np.fromiter((b is not None for b in windows), bool, n)
    present = [b for b in windows if b is not None]

    def window(values: Iterable[int | None]) -> pa.Array:
        """A breakdown's number per step (NULL for a step without one)."""
        got = np.zeros(n, np.int64)
        got[with_window] = np.fromiter(values, np.int64, len(present))
        return int64_array(got, with_window)

    host_range = np.fromiter((_NO_VALUE if (v := b.host_range_ns) is None else v for b in present), np.int64,
                             len(present))
    host_range_all = np.full(n, _NO_VALUE, np.int64)
    host_range_all[with_window] = host_range
    gaps = [g for b in present for g in b.host_gaps]
    gap_counts = np.zeros(n, np.int64)
    gap_counts[with_window] = np.fromiter((len(b.host_gaps) for b in present), np.int64, len(present))
    gap_ends = int_array((x for g in gaps for x in g), 2 * len(gaps), nullable=False)
    batch_json = _memo_json(batches.get(s.index) for s in steps)
    return {
        "trace_id": _repeat(a.trace_id, n),
        "step": int_array((s.index for s in steps), n, nullable=False),
        "name": string_array((s.name for s in steps), n),
        "source": text_array((s.source for s in steps), n),
        "range_id": int_array((s.range_id for s in steps), n),
        "phase": text_array((s.phase for s in steps), n),
        "split_kv": bool_array((s.split_kv for s in steps), n),
        "start_ns": int_array((s.start_ns for s in steps), n, nullable=False),
        "dur_ns": int_array((s.dur_ns for s in steps), n, nullable=False),
        "attention_ns": int_array((s.attention_ns for s in steps), n, nullable=False),
        "kernel_count": int_array((s.kernel_count for s in steps), n, nullable=False),
        "wall_ns": int_array((s.wall_ns for s in steps), n, nullable=False),
        "window_start_ns": window(b.start_ns for b in present),
        "window_end_ns": window(b.end_ns for b in present),
        "window_source": text_array((b.source if b is not None else None for b in windows), n),
        "host_gap_max_ns": window(b.host_gap_max_ns for b in present),
        "host_long_ns": window(b.host_long_ns for b in present),
        "host_range_ns": int64_array(host_range_all, host_range_all != _NO_VALUE),
        "idle_stretches": window(b.idle_stretches for b in present),
        "host_gaps": list_array(gap_counts, list_array(np.fromiter((len(g) for g in gaps), np.int64, len(gaps)),
                                                       gap_ends), with_window),
        "batch_json": batch_json,
    }


def _breakdown_rows(a: TraceAnalysis) -> dict[str, pa.Array]:
    windows = [(s.index, s.breakdown) for s in a.steps if s.breakdown is not None]
    names: dict[int, tuple[tuple[str, ...], list[int]]] = {}  # id of a names tuple -> (it, each name's code)
    words: dict[str, int] = {}

    def codes_of(b: StepBreakdown) -> list[int]:
        got = names.get(id(b.component_names))
        if got is None:
            got = names[id(b.component_names)] = (
                b.component_names, [words.setdefault(w, len(words)) for w in b.component_names])
        return got[1]

    lengths = np.fromiter((len(b.component_names) for _, b in windows), np.int64, len(windows))
    n = int(lengths.sum())
    component = np.fromiter(itertools.chain.from_iterable(codes_of(b) for _, b in windows), np.int64, n)
    return {"trace_id": _repeat(a.trace_id, n),
            "step": int64_array(np.repeat(np.fromiter((i for i, _ in windows), np.int64, len(windows)), lengths)),
            "component": dictionary_array(list(words), component),
            "ns": int64_array(components_ns([b for _, b in windows]))}


def _launch_rows(a: TraceAnalysis) -> dict[str, pa.Array]:
    measured = a.schedule.measured if a.schedule is not None else {}
    places = [(s.index, j, x) for s in a.steps for j, x in enumerate(s.launches)]
    launches = [x for _, _, x in places]
    kernels = [x.attention for x in launches]
    n = len(launches)
    merges = [x.merges for x in launches]
    prepares = [x.prepares for x in launches]
    tiles = [x.tiles for x in launches]
    meas = [measured.get(k.kernel_id) for k in kernels] if measured else None

    def per_measured(field: str, make: Callable[[Iterable[Any], int], pa.Array], kind: pa.DataType) -> pa.Array:
        if meas is None:
            return pa.nulls(n, kind)
        return make((None if m is None else getattr(m, field) for m in meas), n)

    def attached_ids(groups: list[Sequence[Any]]) -> pa.Array:
        lengths = np.fromiter(map(len, groups), np.int64, n)
        ids = int_array((k.kernel_id for g in groups for k in g), int(lengths.sum()), nullable=False)
        return list_array(lengths, ids)

    def triples(values: Iterable[tuple[int, int, int]]) -> pa.Array:
        """(x, y, z) per launch as a list column."""
        return list_array(np.full(n, 3, np.int64), int_array((v for t in values for v in t), 3 * n, nullable=False))

    return {
        "trace_id": _repeat(a.trace_id, n),
        "step": int_array((i for i, _, _ in places), n, nullable=False),
        "kernel_id": int_array((k.kernel_id for k in kernels), n, nullable=False),
        "kernel": text_array((k.kernel for k in kernels), n),
        "backend": text_array((k.backend for k in kernels), n),
        "phase": text_array((x.phase for x in launches), n),
        "phase_evidence": text_array((x.phase_evidence for x in launches), n),
        "split_kv": bool_array((x.split_kv for x in launches), n),
        "split_evidence": text_array((x.split_evidence for x in launches), n),
        "start_ns": int_array((k.start_ns for k in kernels), n, nullable=False),
        "dur_ns": int_array((k.dur_ns for k in kernels), n, nullable=False),
        "merge_kernel_ids": attached_ids(merges),
        "merge_ns": int_array((sum(m.dur_ns for m in g) if g else 0 for g in merges), n),
        "prepare_kernel_ids": attached_ids(prepares),
        "prepare_ns": int_array((sum(p.dur_ns for p in g) if g else 0 for g in prepares), n),
        "tile_padding_share": python_array([t["padding_share"] if t else None for t in tiles]),
        "launch": int_array((j for _, j, _ in places), n, nullable=False),
        "name": text_array((k.name for k in kernels), n),
        "family": text_array((k.family for k in kernels), n),
        "params_json": _memo_json(k.params for k in kernels),
        "grid": triples(k.grid for k in kernels),
        "block": triples(k.block for k in kernels),
        "registers_per_thread": int_array((k.registers_per_thread for k in kernels), n),
        "smem_bytes": int_array((k.smem_bytes for k in kernels), n),
        "stream": int_array((k.stream_id for k in kernels), n),
        "merges_json": _attached_json(merges),
        "prepares_json": _attached_json(prepares),
        "tiles_json": _memo_json(tiles),
        "ncu_id": per_measured("ncu_id", int_array, pa.int64()),
        "sm_active_min": per_measured("sm_active_min", float_array, pa.float64()),
        "sm_active_avg": per_measured("sm_active_avg", float_array, pa.float64()),
        "sm_active_max": per_measured("sm_active_max", float_array, pa.float64()),
    }


def _model_rows(a: TraceAnalysis) -> dict[str, pa.Array]:
    sched = a.schedule
    models = sorted(sched.models.items()) if sched is not None else []
    n = len(models)
    ms = [m for _, m in models]
    meas = [sched.measured.get(kid) for kid, _ in models] if sched is not None and sched.measured else None
    return {
        "trace_id": _repeat(a.trace_id, n),
        "kernel_id": int_array((kid for kid, _ in models), n, nullable=False),
        "source": text_array((m.source for m in ms), n),
        "work_items": python_array([m.work_items for m in ms]),
        "chunk_tokens": python_array([m.chunk_tokens for m in ms]),
        "split_kv": python_array([m.split_kv for m in ms]),
        "predicted_ns": python_array([m.predicted_ns for m in ms]),
        "sm_idle": python_array([m.sm_idle for m in ms]),
        "tail_ns": python_array([m.tail_ns for m in ms]),
        "balanced_ns": python_array([m.balanced_ns for m in ms]),
        "grid_matches": python_array([m.grid_matches for m in ms]),
        "longest_item_tokens": python_array([m.longest_item_tokens for m in ms]),
        "measured_sm_idle": (pa.nulls(n) if meas is None else
                             python_array([x.sm_idle if x is not None else None for x in meas])),
        "note": text_array((m.note for m in ms), n),
    }


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
    """The document's trace-level sections (`json_doc.trace_sections`; the steps, findings and checks have their
    own tables)."""
    from traceinsight.report.gantt import stored_gantt

    doc = json_doc.trace_sections(a)
    t = doc["trace"]
    row = {"trace_id": a.trace_id, "analyzer": doc["tool"]["version"], "path": t["path"], "format": t["format"],
           "format_version": t["format_version"], "tool_version": t["tool_version"], "gpu_json": _json(t["gpu"]),
           "start_ns": t["start_ns"], "end_ns": t["end_ns"], "dur_ns": t["dur_ns"], "warnings": list(t["warnings"]),
           "families_json": _json(doc["families"]), "kernels_json": _json(doc["kernels"]),
           "thresholds_json": _json(doc["thresholds"]), "summary_json": _json(doc["summary"]),
           "step_summary_json": _json(doc["step_summary"]), "savings_json": _json(doc["savings"]),
           "model_json": _json(doc["model"]), "sweep_json": _json(doc["sweep"]), "extra_json": _json(a.extra),
           "gantt_json": stored_gantt(a)}
    return {c: [v] for c, v in row.items()}


def _repeat(value: int, n: int) -> pa.Array:
    """`value` in each of n rows (a trace_id)."""
    return int64_array(np.full(n, value, np.int64))


# Where an int column holds None while it is built, for numbers that may take any int64 value but this one.
_NO_VALUE = np.iinfo(np.int64).min


def _memo_json(values: Iterable[Any]) -> pa.Array:
    """Each value as JSON (None as NULL), written once per distinct object: a kernel's params dict is shared by its
    launches (parsed once per text, `model.steps`), a trace-side batch by the steps of one shape."""
    values = list(values)
    if all(v is None for v in values):
        return pa.nulls(len(values), pa.string())
    done: dict[int, tuple[Any, int]] = {}  # id -> (the object, kept alive so that its id is not reused; its code)
    texts: list[str | None] = []

    def code(v: Any) -> int:
        got = done.get(id(v))
        if got is None:
            got = done[id(v)] = (v, len(texts))
            texts.append(None if v is None else _json(v.to_json() if hasattr(v, "to_json") else v))
        return got[1]

    codes = np.fromiter(map(code, values), np.int64)
    return dictionary_array(texts, codes)


def _attached_json(groups: Sequence[Sequence[Any]]) -> pa.Array:
    """Each launch's merge or prepare kernels as the document lists them, as JSON: `_json(_attached(group))`, the
    text of each kernel but its duration written once per kernel name and grid."""
    heads: dict[tuple[str, tuple[int, ...]], str] = {}

    def text(group: Sequence[Any]) -> str:
        if not group:
            return "[]"
        parts = []
        for m in group:
            if type(m.dur_ns) is not int:  # a number orjson might write otherwise
                return _json(_attached(group))
            head = heads.get(key := (m.kernel, m.grid))
            if head is None:
                head = heads[key] = _json({"kernel": m.kernel, "grid": list(m.grid)})[:-1] + ',"dur_ns":'
            parts.append(f"{head}{m.dur_ns}}}")
        return "[" + ",".join(parts) + "]"

    return string_array(map(text, groups), len(groups))


def _attached(kernels: Sequence[Any]) -> list[dict[str, Any]]:
    """Merge or prepare kernels as the document lists them."""
    return [{"kernel": m.kernel, "grid": list(m.grid), "dur_ns": m.dur_ns} for m in kernels]


def _json(v: Any) -> str:
    return orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS).decode()


# Each table's columns: Arrow arrays, or Python values (a few rows) that `python_array` converts.
BUILDERS: dict[str, Callable[[TraceAnalysis], dict[str, Any]]] = {
    "steps": _step_rows, "step_breakdown": _breakdown_rows, "attention_launches": _launch_rows,
    "launch_models": _model_rows, "findings": _finding_rows, "rule_checks": _check_rows, "analyses": _analysis_rows}


def write_tables(db: TraceDB, analyses: Iterable[TraceAnalysis], into: str | None = None) -> None:
    """Write (or rewrite) the analysis tables of these analyses into `db`, typed by schema.sql; `into`: into the
    tables of that attached database instead (which must have them), one table at a time. Each table is built as
    Arrow a column at a time from numpy buffers (text with few distinct values dictionary-encoded), not by
    pyarrow's conversion of Python values, which imports pandas and holds a Python list per column: a long trace
    has 10^5-10^6 steps and launches."""
    write_tables_on(db.con, analyses, into)


def write_tables_on(con: Any, analyses: Iterable[TraceAnalysis], into: str | None = None) -> None:
    """`write_tables` on a DuckDB connection `con` whose database has the analysis tables (`analysis_schema_sql`)."""
    prefix = f"{into}." if into else ""
    for a in analyses:
        _write(con, a, prefix)


def copy_tables(con: Any, trace_ids: Iterable[int], into: str) -> None:
    """Copy the analysis tables of these traces, written on `con` (`write_tables`), into the attached database
    `into`, as they are."""
    ids = ", ".join(str(int(i)) for i in trace_ids)
    if not ids:
        return
    for name in ANALYSIS_TABLES:
        con.execute(f"DELETE FROM {into}.{name} WHERE trace_id IN ({ids})")
        con.execute(f"INSERT INTO {into}.{name} BY NAME SELECT * FROM {name} WHERE trace_id IN ({ids})")


def _write(con: Any, a: TraceAnalysis, prefix: str) -> None:
    with gc_paused():  # the columns' temporary objects hold no cycle; a collection would walk the whole analysis
        for name in ANALYSIS_TABLES:
            con.execute(f"DELETE FROM {prefix}{name} WHERE trace_id = ?", [a.trace_id])
            cols = BUILDERS[name](a)
            if not len(cols["trace_id"]):
                continue
            rows = pa.table({c: v if isinstance(v, pa.Array) else python_array(v)  # noqa: F841 (scanned by name)
                             for c, v in cols.items()})
            del cols
            con.execute(f"INSERT INTO {prefix}{name} BY NAME SELECT * FROM rows")
