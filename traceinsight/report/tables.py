"""The analysis as tables: one trace's steps, their breakdowns, attention launches, launch models, findings and
rule checks, written into its DuckDB database (the tables of `ingest/schema.sql` below "The analysis as tables";
docs/SCHEMA.md). `traceinsight sql` queries them and `export --parquet --analysis` writes them out: the same
numbers the JSON document holds, in rows (tests/test_tables.py holds the two together)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.ingest.arrow_numpy import (
    dictionary_array,
    float_array,
    int64_array,
    int_array,
    list_array,
    none_count,
    python_array,
    text_array,
)
from traceinsight.ingest.schema import analysis_table_names
from traceinsight.ingest.schema import mentions_analysis as mentions_analysis  # `sql` asks it without pyarrow
from traceinsight.ingest.store import ROW_GROUP_ROWS, TraceDB, insert_in_slices
from traceinsight.model import shared_objects
from traceinsight.model.kernel_columns import kernel_ids, kernel_ints
from traceinsight.model.planners.types import gc_paused
from traceinsight.model.shared_objects import first_rows
from traceinsight.report import json_doc
from traceinsight.report.step_columns import ARENA_FIELDS, NO_RANGE, SPLIT_CODES, StepColumns, step_columns

# The tables this module fills (schema.sql's analysis tables), in the order they are written.
ANALYSIS_TABLES = analysis_table_names()
# In a compressed in-memory database, a table of at least CHECKPOINT_MIN_ROWS rows is inserted CHECKPOINT_ROWS at a
# time (whole row groups), each slice compressed before the next (`_insert`).
CHECKPOINT_MIN_ROWS = 50_000
CHECKPOINT_ROWS = 2 * ROW_GROUP_ROWS


def _step_rows(a: TraceAnalysis, columns: Callable[[], StepColumns]) -> dict[str, pa.Array]:
    c = columns()
    n = c.n
    batches = a.schedule.batches if a.schedule is not None else {}
    windowed = c.windowed
    host_gaps = c.host_gaps

    def window(field: str) -> pa.Array:
        """A breakdown's number per step (NULL for a step without one, or for no host range)."""
        got = np.full(n, NO_RANGE, np.int64)
        got[windowed] = c.window_numbers[:, ARENA_FIELDS.index(field)]
        return int64_array(got, got != NO_RANGE)

    sources = np.full(n, None, object)
    sources[windowed] = c.window_source
    gap_counts = np.zeros(n, np.int64)
    gap_counts[windowed] = np.fromiter(map(len, host_gaps), np.int64, len(host_gaps))
    gaps = list(chain.from_iterable(host_gaps))
    gap_ends = int64_array(np.fromiter(chain.from_iterable(gaps), np.int64))
    return {
        "trace_id": _repeat(a.trace_id, n),
        "step": int64_array(c.index),
        "name": text_array(c.name, n),
        "source": text_array(c.source, n),
        "range_id": int_array(c.range_id, len(c.range_id)),
        "phase": text_array(c.phase, n),
        "split_kv": _split_array(c.split),
        "start_ns": int64_array(c.start),
        "dur_ns": int64_array(c.dur),
        "attention_ns": int64_array(c.attention),
        "kernel_count": int64_array(c.kernel_count),
        "wall_ns": int64_array(c.wall),
        "window_start_ns": window("start_ns"),
        "window_end_ns": window("end_ns"),
        "window_source": text_array(sources.tolist(), n),
        "host_gap_max_ns": window("host_gap_max_ns"),
        "host_long_ns": window("host_long_ns"),
        "host_range_ns": window("host_range_ns"),
        "idle_stretches": window("idle_stretches"),
        "host_gaps": list_array(gap_counts, list_array(np.fromiter(map(len, gaps), np.int64, len(gaps)), gap_ends),
                                windowed),
        "batch_json": _memo_json(list(map(batches.get, c.index.tolist()))) if batches else pa.nulls(n, pa.string()),
    }


def _breakdown_rows(a: TraceAnalysis, columns: Callable[[], StepColumns]) -> dict[str, pa.Array]:
    c = columns()
    tuples = c.component_names
    ids = np.fromiter(map(id, tuples), np.int64, len(tuples))
    _, first, which = np.unique(ids, return_index=True, return_inverse=True)
    distinct = [tuples[i] for i in first.tolist()]  # the shared tuples of names, each once
    words = list(dict.fromkeys(w for names in distinct for w in names))
    code = {w: i for i, w in enumerate(words)}
    widths = np.fromiter(map(len, distinct), np.int64, len(distinct))
    table = np.full((len(distinct), int(widths.max(initial=0))), -1, np.int64)  # each tuple's codes, padded
    for i, names in enumerate(distinct):
        table[i, :len(names)] = [code[w] for w in names]
    rows = table[which.reshape(-1)]
    component = rows[rows >= 0]  # row by row, in each tuple's order
    lengths = widths[which.reshape(-1)]
    n = int(lengths.sum())
    return {"trace_id": _repeat(a.trace_id, n),
            "step": int64_array(np.repeat(c.index[c.windowed], lengths)),
            "component": dictionary_array(words, component),
            "ns": int64_array(c.component_ns)}


def _launch_rows(a: TraceAnalysis, columns: Callable[[], StepColumns]) -> dict[str, pa.Array]:
    c = columns()
    measured = a.schedule.measured if a.schedule is not None else {}
    n = c.m
    meas = [measured.get(k) for k in c.k_id.tolist()] if measured else None

    def per_measured(field: str, make: Callable[[Iterable[Any], int], pa.Array], kind: pa.DataType) -> pa.Array:
        if meas is None:
            return pa.nulls(n, kind)
        return make((None if m is None else getattr(m, field) for m in meas), n)

    def attached_ids(groups: tuple[Sequence[Any], ...]) -> pa.Array:
        lengths = np.fromiter(map(len, groups), np.int64, n)
        return list_array(lengths, int64_array(kernel_ids(list(chain.from_iterable(groups)))))

    tiles = c.tiles
    return {
        "trace_id": _repeat(a.trace_id, n),
        "step": int64_array(c.index[c.step]),
        "kernel_id": int64_array(c.k_id),
        "kernel": text_array(c.k_kernel, n),
        "backend": text_array(c.k_backend, n),
        "phase": text_array(c.l_phase, n),
        "phase_evidence": text_array(c.l_phase_evidence, n),
        "split_kv": _split_array(c.l_split),
        "split_evidence": text_array(c.l_split_evidence, n),
        "start_ns": int64_array(c.k_start),
        "dur_ns": int64_array(c.k_dur),
        "merge_kernel_ids": attached_ids(c.merges),
        "merge_ns": int64_array(c.merge_ns),
        "prepare_kernel_ids": attached_ids(c.prepares),
        "prepare_ns": int64_array(c.prepare_ns),
        "tile_padding_share": (pa.nulls(n) if none_count(tiles) == n
                               else python_array([t["padding_share"] if t else None for t in tiles])),
        "launch": int64_array(c.launch),
        "name": text_array(c.k_name, n),
        "family": text_array(c.k_family, n),
        "params_json": _memo_json(c.k_params),
        "grid": _triples(c.k_grid),
        "block": _triples(c.k_block),
        "registers_per_thread": int_array(c.k_registers, len(c.k_registers)),
        "smem_bytes": int_array(c.k_smem, len(c.k_smem)),
        "stream": int_array(c.k_stream, len(c.k_stream)),
        "merges_json": _attached_json(c.merges),
        "prepares_json": _attached_json(c.prepares),
        "tiles_json": _memo_json(tiles),
        "ncu_id": per_measured("ncu_id", int_array, pa.int64()),
        "sm_active_min": per_measured("sm_active_min", float_array, pa.float64()),
        "sm_active_avg": per_measured("sm_active_avg", float_array, pa.float64()),
        "sm_active_max": per_measured("sm_active_max", float_array, pa.float64()),
    }


_SHAPE = attrgetter("_shape")
_MODEL = attrgetter("source", "work_items", "chunk_tokens", "split_kv", "predicted_ns", "sm_idle", "tail_ns",
                    "balanced_ns", "grid_matches", "longest_item_tokens", "note")


def _model_rows(a: TraceAnalysis, _: Callable[[], StepColumns]) -> dict[str, pa.Array]:
    sched = a.schedule
    models = sched.models if sched is not None else {}
    n = len(models)
    kids = np.fromiter(models.keys(), np.int64, n)
    ms = list(models.values())
    order = np.argsort(kids, kind="stable")
    if n and (order[1:] < order[:-1]).any():  # not already in kernel_id order
        kids, ms = kids[order], [ms[i] for i in order.tolist()]
    # A model is shared by the launches that have its inputs (`launch_models`): its fields read once per model.
    objects, codes = shared_objects.distinct(ms)
    (source, work_items, chunk_tokens, split_kv, predicted_ns, sm_idle, tail_ns, balanced_ns, grid_matches,
     longest, note) = [()] * 11 if not n else zip(*map(_MODEL, objects), strict=True)
    meas = [sched.measured.get(kid) for kid in kids.tolist()] if sched is not None and sched.measured else None
    return {
        "trace_id": _repeat(a.trace_id, n),
        "kernel_id": int64_array(kids),
        "source": dictionary_array(source, codes),
        "work_items": _python_of(work_items, codes),
        "chunk_tokens": _python_of(chunk_tokens, codes),
        "split_kv": _python_of(split_kv, codes),
        "predicted_ns": _python_of(predicted_ns, codes),
        "sm_idle": _python_of(sm_idle, codes),
        "tail_ns": _python_of(tail_ns, codes),
        "balanced_ns": _python_of(balanced_ns, codes),
        "grid_matches": _python_of(grid_matches, codes),
        "longest_item_tokens": _python_of(longest, codes),
        "measured_sm_idle": (pa.nulls(n) if meas is None else
                             python_array([x.sm_idle if x is not None else None for x in meas])),
        "note": dictionary_array(note, codes),
    }


def _python_of(values: Sequence[Any], codes: np.ndarray) -> pa.Array:
    """`_python` of the rows values[codes[i]] (one value per shared object): the usual kinds (None, integers,
    booleans, numbers) built from the objects' values, any other through the rows' values."""
    n = len(codes)
    kinds = set(map(type, values)) - {type(None)}
    if not kinds:
        return pa.nulls(n)
    if kinds == {int}:
        return shared_objects.ints_of(values, codes)
    if kinds == {bool}:
        return shared_objects.bools_of(values, codes)
    if kinds <= {int, float}:
        return shared_objects.floats_of(values, codes)
    return _python([values[c] for c in codes.tolist()])


def _finding_rows(a: TraceAnalysis, _: Callable[[], StepColumns]) -> dict[str, Any]:
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
    steps = cols.pop("steps")  # 10^5-10^6 step indexes in all on a long trace: from numpy, not a scan per value
    lengths = np.fromiter(map(len, steps), np.int64, len(steps))
    flat = np.fromiter(chain.from_iterable(steps), np.int64, int(lengths.sum()))
    return {**cols, "steps": list_array(lengths, int64_array(flat))}


def _check_rows(a: TraceAnalysis, _: Callable[[], StepColumns]) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {c: [] for c in ("trace_id", "rule_id", "name", "status", "reason", "findings")}
    for c in a.checks:
        j = c.to_json()
        for col, v in (("trace_id", a.trace_id), ("rule_id", j["id"]), ("name", j["name"]), ("status", j["status"]),
                       ("reason", j["reason"]), ("findings", j["findings"])):
            cols[col].append(v)
    return cols


def _analysis_rows(a: TraceAnalysis, columns: Callable[[], StepColumns]) -> dict[str, list[Any]]:
    """The document's trace-level sections (`json_doc.trace_sections`; the steps, findings and checks have their
    own tables)."""
    from traceinsight.report.gantt import stored_gantt

    doc = json_doc.trace_sections(a, columns())
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


def _split_array(codes: np.ndarray) -> pa.Array:
    """Split-KV states (`step_columns.SPLIT_CODES`) as a bool Arrow array, None as NULL."""
    valid = codes != SPLIT_CODES[None]
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    values = pa.py_buffer(np.packbits(codes == SPLIT_CODES[True], bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), len(codes), [validity, values])


def _python(values: Sequence[Any]) -> pa.Array:
    """`python_array(values)`, the usual columns (all None; integers without None) read without a scan per row in
    Python."""
    n = len(values)
    kinds = set(map(type, values)) - {type(None)}
    if not kinds:
        return pa.nulls(n)
    if kinds == {int}:
        return int_array(values, len(values))
    return python_array(values)


def _distinct(values: Sequence[Any]) -> tuple[list[Any], np.ndarray]:
    """The distinct objects of `values` (by identity: a kernel's params dict, grid tuple or a step's batch is shared
    by the rows that have it) and each row's position among them."""
    ids = np.fromiter(map(id, values), np.int64, len(values))
    _, first, codes = np.unique(ids, return_index=True, return_inverse=True)
    return [values[i] for i in first.tolist()], codes.reshape(-1)


def _memo_json(values: Sequence[Any]) -> pa.Array:
    """Each value as JSON (None as NULL), written once per distinct object: a kernel's params dict is shared by its
    launches (parsed once per text, `model.steps`), a trace-side batch by the steps of one shape."""
    if none_count(values) == len(values):
        return pa.nulls(len(values), pa.string())
    objects, codes = _distinct(values)
    texts = [None if v is None else _json(v.to_json() if hasattr(v, "to_json") else v) for v in objects]
    return dictionary_array(texts, codes)


def _triples(values: Sequence[tuple[int, int, int]]) -> pa.Array:
    """(x, y, z) per launch as a list column (the tuples are shared: a few distinct grids)."""
    n = len(values)
    objects, codes = _distinct(values)
    flat = np.array(objects, np.int64).reshape(-1, 3)[codes].reshape(-1) if n else np.zeros(0, np.int64)
    return list_array(np.full(n, 3, np.int64), int64_array(flat))


def _attached_json(groups: Sequence[Sequence[Any]]) -> pa.Array:
    """Each launch's merge or prepare kernels as the document lists them, as JSON: `_json(_attached(group))`, the
    text of each kernel but its duration written once per kernel view shape (kernel name and grid among its
    fields), the durations read from the kernels' rows."""
    full = [i for i, g in enumerate(groups) if g]  # most launches have none
    codes = np.zeros(len(groups), np.int64)
    codes[full] = np.arange(1, len(full) + 1)
    kernels = list(chain.from_iterable(groups[i] for i in full))
    rows, shape_of = first_rows(list(map(_SHAPE, kernels)))
    heads = [_json({"kernel": kernels[r].kernel, "grid": list(kernels[r].grid)})[:-1] + ',"dur_ns":'
             for r in rows.tolist()]
    parts = [f"{h}{d}}}" for h, d in zip(map(heads.__getitem__, shape_of.tolist()),
                                          kernel_ints(kernels, ("dur_ns",))["dur_ns"].tolist(), strict=True)]
    if len(kernels) == len(full):  # one kernel each (a merge kernel per split launch)
        texts = [f"[{p}]" for p in parts]
    else:
        ends = np.cumsum(np.fromiter((len(groups[i]) for i in full), np.int64, len(full))).tolist()
        texts = ["[" + ",".join(parts[a:b]) + "]" for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    return dictionary_array(["[]", *texts], codes)


def _attached(kernels: Sequence[Any]) -> list[dict[str, Any]]:
    """Merge or prepare kernels as the document lists them."""
    return [{"kernel": m.kernel, "grid": list(m.grid), "dur_ns": m.dur_ns} for m in kernels]


def _json(v: Any) -> str:
    return orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS).decode()


# Each table's columns: Arrow arrays, or Python values (a few rows) that `python_array` converts.
BUILDERS: dict[str, Callable[[TraceAnalysis, Callable[[], StepColumns]], dict[str, Any]]] = {
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


def _compressed_in_memory(con: Any, prefix: str) -> bool:
    """Whether the tables' database (`prefix`'s, else the current one) is in memory with compression (TraceDB's):
    its rows stay as inserted until a checkpoint compresses them."""
    row = con.execute("SELECT path IS NULL AND coalesce(options['compress'], '') = 'true' FROM duckdb_databases() "
                      "WHERE database_name = coalesce(?, current_database())", [prefix[:-1] or None]).fetchone()
    return bool(row and row[0])


def _insert(con: Any, table: str, rows: pa.Table, compress: bool) -> None:
    """Insert `rows` into `table`; `compress`: a long table a few row groups at a time, each compressed (a
    checkpoint) before the next. DuckDB holds a row as inserted until then: ~1.2 KB a launch (its text once per
    row), 270 MB for the 1M-kernel export's launches against ~10 MB compressed, 2.7 GB at 10M."""
    if not compress or rows.num_rows < CHECKPOINT_MIN_ROWS:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM rows")
        return
    insert_in_slices(con, f"INSERT INTO {table} BY NAME SELECT * FROM rows", rows, CHECKPOINT_ROWS)


def _write(con: Any, a: TraceAnalysis, prefix: str) -> None:
    compress = _compressed_in_memory(con, prefix)
    with gc_paused():  # the columns' temporary objects hold no cycle; a collection would walk the whole analysis
        # once, for the tables that read the steps (from the steps' arrays the rules read)
        columns = functools.cache(lambda: step_columns(a.steps, a.step_arrays()))
        for name in ANALYSIS_TABLES:
            con.execute(f"DELETE FROM {prefix}{name} WHERE trace_id = ?", [a.trace_id])
            cols = BUILDERS[name](a, columns)
            if not len(cols["trace_id"]):
                continue
            rows = pa.table({c: v if isinstance(v, pa.Array) else python_array(v) for c, v in cols.items()})
            del cols
            _insert(con, prefix + name, rows, compress)
            del rows
    a.release_step_arrays()  # the last reader: 10^6 steps' arrays need not outlive the tables
