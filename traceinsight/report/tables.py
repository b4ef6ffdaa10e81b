"""The analysis as tables: one trace's steps, their breakdowns, attention launches, launch models, findings and
rule checks, written into its DuckDB database (the tables of `ingest/schema.sql` below "The analysis as tables";
docs/SCHEMA.md). `traceinsight sql` queries them and `export --parquet --analysis` writes them out: the same
numbers the JSON document holds, in rows (tests/test_tables.py holds the two together)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
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
from traceinsight.model.shared_objects import Coded, first_rows
from traceinsight.report import json_doc
from traceinsight.report.step_columns import ARENA_FIELDS, NO_RANGE, SPLIT_CODES, StepColumns, group_ns, step_columns

# The tables this module fills (schema.sql's analysis tables), in the order they are written.
ANALYSIS_TABLES = analysis_table_names()
# In a compressed in-memory database, a table of at least CHECKPOINT_MIN_ROWS rows is inserted CHECKPOINT_ROWS at a
# time (whole row groups), each slice compressed before the next (`_insert`).
CHECKPOINT_MIN_ROWS = 50_000
CHECKPOINT_ROWS = 2 * ROW_GROUP_ROWS
# The steps, step breakdown and launches tables are built SLICE_ROWS rows at a time, each slice inserted and let
# go before the next is built (`_slices`): Python holds one slice's columns (~200 bytes a launch), not the table's.
# Slices of one row group (half this) were slower to insert and left ~150 MB more resident at 1M kernels.
SLICE_ROWS = CHECKPOINT_ROWS


def _slices(n: int) -> Iterator[slice]:
    """The rows of a table of n rows in slices of SLICE_ROWS, each built, inserted and let go before the next
    (`_write`; one empty slice for none)."""
    for first in range(0, max(n, 1), SLICE_ROWS):
        yield slice(first, first + SLICE_ROWS)


def _step_rows(a: TraceAnalysis, columns: Callable[[], StepColumns]) -> Iterator[dict[str, pa.Array]]:
    c = columns()
    batches = a.schedule.batches if a.schedule is not None else {}
    for rows in _slices(c.n):
        yield _step_slice(a.trace_id, c, rows, batches)


def _step_slice(trace_id: int, c: StepColumns, rows: slice, batches: dict[int, Any]) -> dict[str, pa.Array]:
    index = c.index[rows]
    n = len(index)
    windowed = c.windowed[rows]
    first = int(np.count_nonzero(c.windowed[:rows.start]))  # the slice's first breakdown among the windowed steps
    at = slice(first, first + int(np.count_nonzero(windowed)))
    numbers = c.window_numbers[at]
    host_gaps = c.host_gaps[at]

    def window(field: str) -> pa.Array:
        """A breakdown's number per step (NULL for a step without one, or for no host range)."""
        got = np.full(n, NO_RANGE, np.int64)
        got[windowed] = numbers[:, ARENA_FIELDS.index(field)]
        return int64_array(got, got != NO_RANGE, copy=False)

    sources = np.full(n, None, object)
    sources[windowed] = c.window_source[at]
    gap_counts = np.zeros(n, np.int64)
    gap_counts[windowed] = np.fromiter(map(len, host_gaps), np.int64, len(host_gaps))
    gaps = list(chain.from_iterable(host_gaps))
    gap_ends = int64_array(np.fromiter(chain.from_iterable(gaps), np.int64), copy=False)
    range_id = c.range_id[rows]
    return {
        "trace_id": _repeat(trace_id, n),
        "step": int64_array(index, copy=False),
        "name": _text(c.name[rows]),
        "source": _text(c.source[rows]),
        "range_id": int_array(range_id, len(range_id)),
        "phase": _text(c.phase[rows]),
        "split_kv": _split_array(c.split[rows]),
        "start_ns": int64_array(c.start[rows], copy=False),
        "dur_ns": int64_array(c.end[rows] - c.start[rows], copy=False),
        "attention_ns": int64_array(c.attention[rows], copy=False),
        "kernel_count": int64_array(c.kernel_count[rows], copy=False),
        "wall_ns": int64_array(c.window_end[rows] - c.window_start[rows], copy=False),
        "window_start_ns": window("start_ns"),
        "window_end_ns": window("end_ns"),
        "window_source": text_array(sources.tolist(), n),
        "host_gap_max_ns": window("host_gap_max_ns"),
        "host_long_ns": window("host_long_ns"),
        "host_range_ns": window("host_range_ns"),
        "idle_stretches": window("idle_stretches"),
        "host_gaps": list_array(gap_counts, list_array(np.fromiter(map(len, gaps), np.int64, len(gaps)), gap_ends),
                                windowed),
        "batch_json": _memo_json(list(map(batches.get, index.tolist()))) if batches else pa.nulls(n, pa.string()),
    }


def _breakdown_rows(a: TraceAnalysis, columns: Callable[[], StepColumns]) -> Iterator[dict[str, pa.Array]]:
    c = columns()
    tuples = c.component_names
    ids = np.fromiter(map(id, tuples), np.int64, len(tuples))
    _, first, which = np.unique(ids, return_index=True, return_inverse=True)
    which = which.reshape(-1)
    distinct = [tuples[i] for i in first.tolist()]  # the shared tuples of names, each once
    words = list(dict.fromkeys(w for names in distinct for w in names))
    code = {w: i for i, w in enumerate(words)}
    widths = np.fromiter(map(len, distinct), np.int64, len(distinct))
    table = np.full((len(distinct), int(widths.max(initial=0))), -1, np.int64)  # each tuple's codes, padded
    for i, names in enumerate(distinct):
        table[i, :len(names)] = [code[w] for w in names]
    lengths = widths[which]  # each windowed step's components
    ends = np.cumsum(lengths)
    steps = c.index[c.windowed]
    total = int(ends[-1]) if len(ends) else 0
    for rows in _slices(total):  # a row per component, a breakdown's in its order
        at = np.arange(rows.start, min(rows.stop, total), dtype=np.int64)
        step = np.searchsorted(ends, at, side="right")  # each row's breakdown among the windowed steps
        yield {"trace_id": _repeat(a.trace_id, len(at)),
               "step": int64_array(steps[step], copy=False),
               "component": dictionary_array(words, table[which[step], at - (ends - lengths)[step]]),
               "ns": int64_array(c.component_ns[rows], copy=False)}


def _launch_rows(a: TraceAnalysis, columns: Callable[[], StepColumns]) -> Iterator[dict[str, pa.Array]]:
    c = columns()
    measured = a.schedule.measured if a.schedule is not None else {}
    ends = np.cumsum(c.launch_count)
    for rows in _slices(c.m):
        yield _launch_slice(a.trace_id, c, rows, ends, measured)


def _launch_slice(trace_id: int, c: StepColumns, rows: slice, ends: np.ndarray, measured: dict[int, Any]
                  ) -> dict[str, pa.Array]:
    kid = c.k_id[rows]
    n = len(kid)
    at = np.arange(n, dtype=np.int64) + rows.start
    step = np.searchsorted(ends, at, side="right")  # each launch's step's position
    meas = [measured.get(k) for k in kid.tolist()] if measured else None

    def per_measured(field: str, make: Callable[[Iterable[Any], int], pa.Array], kind: pa.DataType) -> pa.Array:
        if meas is None:
            return pa.nulls(n, kind)
        return make((None if m is None else getattr(m, field) for m in meas), n)

    def attached_ids(groups: Coded) -> pa.Array:
        lengths = np.fromiter(map(len, groups.values), np.int64, len(groups.values))[groups.codes]
        return list_array(lengths, int64_array(kernel_ids(list(chain.from_iterable(groups))), copy=False))

    tiles = c.tiles[rows]
    return {
        "trace_id": _repeat(trace_id, n),
        "step": int64_array(c.index[step], copy=False),
        "kernel_id": int64_array(kid, copy=False),
        "kernel": _text(c.k_kernel[rows]),
        "backend": _text(c.k_backend[rows]),
        "phase": _text(c.l_phase[rows]),
        "phase_evidence": _text(c.l_phase_evidence[rows]),
        "split_kv": _split_array(c.l_split[rows]),
        "split_evidence": _text(c.l_split_evidence[rows]),
        "start_ns": int64_array(c.k_start[rows], copy=False),
        "dur_ns": int64_array(c.k_dur[rows], copy=False),
        "merge_kernel_ids": attached_ids(c.merges[rows]),
        "merge_ns": int64_array(group_ns(c.merges[rows]), copy=False),
        "prepare_kernel_ids": attached_ids(c.prepares[rows]),
        "prepare_ns": int64_array(group_ns(c.prepares[rows]), copy=False),
        "tile_padding_share": (pa.nulls(n) if none_count(tiles.values) == len(tiles.values)
                               else _python_of([t["padding_share"] if t else None for t in tiles.values],
                                               tiles.codes)),
        "launch": int64_array(at - (ends - c.launch_count)[step], copy=False),
        "name": _text(c.k_name[rows]),
        "family": _text(c.k_family[rows]),
        "params_json": _memo_json(c.k_params[rows]),
        "grid": _triples(c.k_grid[rows]),
        "block": _triples(c.k_block[rows]),
        "registers_per_thread": _ints(c.k_registers[rows]),
        "smem_bytes": _ints(c.k_smem[rows]),
        "stream": _ints(c.k_stream[rows]),
        "merges_json": _attached_json(c.merges[rows]),
        "prepares_json": _attached_json(c.prepares[rows]),
        "tiles_json": _memo_json(tiles),
        "ncu_id": per_measured("ncu_id", int_array, pa.int64()),
        "sm_active_min": per_measured("sm_active_min", float_array, pa.float64()),
        "sm_active_avg": per_measured("sm_active_avg", float_array, pa.float64()),
        "sm_active_max": per_measured("sm_active_max", float_array, pa.float64()),
    }


def _text(column: Coded) -> pa.DictionaryArray:
    """Texts or None (a Coded column's) as an Arrow dictionary array."""
    return dictionary_array(column.values, column.codes)


def _ints(column: Coded) -> pa.Array:
    """Integers or None (a Coded column's) as an int64 Arrow array."""
    return shared_objects.ints_of(column.values, column.codes)


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
    return int64_array(np.full(n, value, np.int64), copy=False)


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
    objects, codes = (values.values, values.codes) if isinstance(values, Coded) else _distinct(values)
    if none_count(objects) == len(objects):
        return pa.nulls(len(values), pa.string())
    texts = [None if v is None else _json(v.to_json() if hasattr(v, "to_json") else v) for v in objects]
    return dictionary_array(texts, codes)


def _triples(values: Coded) -> pa.Array:
    """(x, y, z) per launch as a list column (the tuples are shared: a few distinct grids)."""
    n = len(values)
    objects, codes = values.values, values.codes
    flat = np.array(objects, np.int64).reshape(-1, 3)[codes].reshape(-1) if n else np.zeros(0, np.int64)
    return list_array(np.full(n, 3, np.int64), int64_array(flat, copy=False))


def _attached_json(column: Coded) -> pa.Array:
    """Each launch's merge or prepare kernels as the document lists them, as JSON: `_json(_attached(group))`, the
    text of each kernel but its duration written once per kernel view shape (kernel name and grid among its
    fields), the durations read from the kernels' rows; once per distinct group."""
    groups = column.values
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
    return dictionary_array(["[]", *texts], codes[column.codes])


def _attached(kernels: Sequence[Any]) -> list[dict[str, Any]]:
    """Merge or prepare kernels as the document lists them."""
    return [{"kernel": m.kernel, "grid": list(m.grid), "dur_ns": m.dur_ns} for m in kernels]


def _json(v: Any) -> str:
    return orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS).decode()


# A table's columns (Arrow arrays, or Python values of a few rows that `python_array` converts), for one slice of
# its rows; a builder yields its table's slices in row order.
Columns = dict[str, Any]
Builder = Callable[[TraceAnalysis, Callable[[], StepColumns]], Iterator[Columns]]


def _whole(build: Callable[[TraceAnalysis, Callable[[], StepColumns]], Columns]) -> Builder:
    """A table built in one slice (a few rows, or numpy's columns already)."""
    def slices(a: TraceAnalysis, columns: Callable[[], StepColumns]) -> Iterator[Columns]:
        yield build(a, columns)
    return slices


BUILDERS: dict[str, Builder] = {
    "steps": _step_rows, "step_breakdown": _breakdown_rows, "attention_launches": _launch_rows,
    "launch_models": _whole(_model_rows), "findings": _whole(_finding_rows), "rule_checks": _whole(_check_rows),
    "analyses": _whole(_analysis_rows)}


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


# What a step's or a launch's rows hold in a compressed in-memory database before a checkpoint compresses them:
# the 1M-kernel export's tables (228,576 steps, 228,576 launches and their breakdown and model rows) held 521 MB as
# inserted, 19 MB compressed.
UNCOMPRESSED_ROW_BYTES = 1200
# The tables are compressed as they are inserted (checkpoints, `_insert`) only when they would take more than this
# share of what DuckDB's limit leaves (its limit less what it holds): 10M kernels' 5 GB inside a 4 GiB cgroup, not
# the 1M-kernel export's 0.5 GB against a machine's 18 GB (0.6 CPU-s of checkpoints there).
UNCOMPRESSED_SHARE = 4


def _short_of_memory(con: Any, rows: int) -> bool:
    """Whether `rows` steps and launches, inserted as they are, would take more than 1 / UNCOMPRESSED_SHARE of the
    memory DuckDB's limit leaves (`TraceDB.fit_memory` keeps the limit to the process's budget); True when the
    limit cannot be read."""
    from traceinsight.ingest.store import parse_size

    ((limit, held),) = con.execute("SELECT current_setting('memory_limit'), "
                                   "(SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory())").fetchall()
    room = parse_size(str(limit))
    return room is None or rows * UNCOMPRESSED_ROW_BYTES * UNCOMPRESSED_SHARE > room - int(held)


def _compressed_in_memory(con: Any, prefix: str) -> bool:
    """Whether the tables' database (`prefix`'s, else the current one) is in memory with compression (TraceDB's):
    its rows stay as inserted until a checkpoint compresses them."""
    row = con.execute("SELECT path IS NULL AND coalesce(options['compress'], '') = 'true' FROM duckdb_databases() "
                      "WHERE database_name = coalesce(?, current_database())", [prefix[:-1] or None]).fetchone()
    return bool(row and row[0])


class _Inserts:
    """The inserts of one table's slices (`_Writer`'s jobs, in order); `compress`: a long table compressed (a
    checkpoint) each CHECKPOINT_ROWS rows or so, and at its end. DuckDB holds a row as inserted until then: ~1.2 KB
    a launch (its text once per row), 270 MB for the 1M-kernel export's launches against ~10 MB compressed, 2.7 GB
    at 10M."""

    def __init__(self, table: str, compress: bool) -> None:
        self.table = table
        self.sql = f"INSERT INTO {table} BY NAME SELECT * FROM rows"
        self.compress = compress
        self.total = self.pending = 0  # rows inserted, and not yet compressed

    def delete(self, con: Any, trace_id: int) -> None:
        """The table's rows of trace `trace_id`, written before, deleted (`write_tables` rewrites)."""
        con.execute(f"DELETE FROM {self.table} WHERE trace_id = ?", [trace_id])

    def add(self, con: Any, rows: pa.Table) -> None:
        self.total += rows.num_rows
        if self.compress and rows.num_rows > CHECKPOINT_ROWS:  # a table built whole
            insert_in_slices(con, self.sql, rows, CHECKPOINT_ROWS)
            self.pending = 0
        elif rows.num_rows:
            con.execute(self.sql)
            self.pending += rows.num_rows
            if self.compress and self.pending >= CHECKPOINT_ROWS:
                con.execute("CHECKPOINT")
                self.pending = 0

    def end(self, con: Any) -> None:
        if self.compress and self.pending and self.total >= CHECKPOINT_MIN_ROWS:
            con.execute("CHECKPOINT")


class _Writer:
    """DuckDB's side of writing the tables (deletes, inserts, checkpoints) on a thread of its own, in order, while
    the caller builds the next slice's Arrow columns in Python: DuckDB releases the GIL while it inserts (~1.1 s of
    the 1M-kernel export's ~2 s of tables). One job at a time: `put` waits for the previous job to end, so that at
    most two slices are held (the one inserted, the one built). The thread has a cursor of its own on `con`'s
    database; `close` joins it (no thread outlives `write_tables`) and raises what a job raised, as `put` does."""

    def __init__(self, con: Any) -> None:
        import queue
        import threading

        ((current,),) = con.execute("SELECT current_database()").fetchall()  # fetched to the end: `con` is free
        self.cursor = con.cursor()
        self.cursor.execute(f'USE "{current}"')
        self.jobs: queue.Queue[Callable[[Any], None] | None] = queue.Queue(maxsize=1)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="analysis-tables")
        self.thread.start()

    def _run(self) -> None:
        while (job := self.jobs.get()) is not None:
            try:
                if self.error is None:  # after an error, the jobs left are dropped
                    job(self.cursor)
            except BaseException as e:  # handed to the caller (`put`, `close`)
                self.error = e
            finally:
                self.jobs.task_done()
        self.jobs.task_done()

    def put(self, job: Callable[[Any], None]) -> None:
        self.jobs.join()  # the previous job done: its slice let go
        if self.error is not None:
            raise self.error
        self.jobs.put(job)

    def close(self, raising: bool = True) -> None:
        self.jobs.put(None)
        self.thread.join()
        self.cursor.close()
        if self.error is not None and raising:
            raise self.error


def _rows(cols: Columns) -> pa.Table:
    return pa.table({c: v if isinstance(v, pa.Array) else python_array(v) for c, v in cols.items()})


def _write(con: Any, a: TraceAnalysis, prefix: str) -> None:
    with gc_paused():  # the columns' temporary objects hold no cycle; a collection would walk the whole analysis
        # once, for the tables that read the steps (from the steps' arrays the rules read)
        columns = functools.cache(lambda: step_columns(a.steps, a.step_arrays()))
        # checkpoints only where memory asks for them (the launches counted by their models, a model per launch,
        # when the schedule model ran: the step columns are built only for the tables that read them)
        models = a.schedule.models if a.schedule is not None else None
        compress = _compressed_in_memory(con, prefix) and _short_of_memory(
            con, len(a.steps) + (len(models) if models else columns().m))
        writer = _Writer(con)
        try:
            for name in ANALYSIS_TABLES:
                inserts = _Inserts(prefix + name, compress)
                writer.put(functools.partial(inserts.delete, trace_id=a.trace_id))
                for cols in BUILDERS[name](a, columns):
                    writer.put(functools.partial(inserts.add, rows=_rows(cols)))
                    del cols
                writer.put(inserts.end)
        except BaseException:
            writer.close(raising=False)  # the caller's error, not one of the writer's jobs left
            raise
        writer.close()
    a.release_step_arrays()  # the last reader: 10^6 steps' arrays need not outlive the tables
