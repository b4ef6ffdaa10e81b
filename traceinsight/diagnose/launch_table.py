"""The attention launches of one analysis as a relation the rules select their candidates from with named SQL
(traceinsight/queries): one row per `LaunchView`, built once per analysis as an Arrow table and registered as
`attention_launches`, beside `kernel_baselines` (each kernel family's typical time), on a DuckDB connection of
its own.

Why a connection of its own and not the store's: the rows are derived from the model stage's Python objects
(steps, batches, launch models), not from stored tables, so no query here joins a stored table; rules also run on
analyses that have no store (contexts built by hand, saved reports); and a fleet analyses many traces in one
store, where a registered name would have to be made unique per trace and dropped after. The connection is a
cursor of the analysis's database when it has one (`TraceAnalysis.cursor`: its registered names and temporary
tables are its own, and opening it costs nothing, where a new in-memory database took 25-40 ms of a short
trace's analysis), else a database in memory. The Arrow table is registered, not copied. `release(ctx)` closes
the connection when the rules are done."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import attrgetter
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.views import LaunchView, kernel_family, launch_views
from traceinsight.diagnose.views import backend_counts as views_backend_counts
from traceinsight.ingest.arrow_numpy import (
    dictionary_array,
    first_seen_codes,
    int64_array,
    ints,
    numbers,
    python_values,
    text_array,
)
from traceinsight.model.kernel_columns import kernel_ints
from traceinsight.model.shared_objects import bool_codes, bools_of, distinct, first_rows, floats_of, ints_of
from traceinsight.queries import sql

# The columns of `attention_launches` (one row per launch of `launch_views`, in its order) and their types (text
# is held dictionary-encoded).
SCHEMA = pa.schema([
    ("pos", pa.int64()),  # position in launch_views (step order, then launch order in the step)
    ("launch_id", pa.int64()),  # the attention kernel's kernel_id
    ("step", pa.int64()),  # the step's index
    ("name", pa.string()),  # the kernel's full name (one template instance)
    ("name_id", pa.int64()),  # the names numbered from 0 in the order they first appear (orders the rules' groups)
    ("kernel", pa.string()),  # the kernel's base name
    ("family_key", pa.string()),  # what launches are compared with (views.kernel_family)
    ("family_id", pa.int64()),  # the families numbered from 0 in the order they first appear (joins on it)
    ("backend", pa.string()),  # attention backend label, NULL when unknown
    ("phase", pa.string()),  # the launch's phase (decode / unknown; prefill launches are not views)
    ("split_kv", pa.bool_()),  # split-KV on / off, NULL when unknown
    ("dur_ns", pa.int64()),  # the attention kernel's own time (ns), without its merge kernel
    ("predicted_ns", pa.int64()),  # the schedule model's simulated time (ns), NULL without one
    ("balanced_ns", pa.int64()),  # the same work at full-GPU throughput (ns), NULL without a model
    ("simulated", pa.bool_()),  # a simulated schedule (per-SM segments, tail) with a predicted time exists
    ("sm_idle_measured", pa.float64()),  # Nsight Compute's 1 - avg/max of sm__cycles_active, NULL unmatched
    ("sm_idle_model", pa.float64()),  # the simulated SM idle fraction, NULL without a simulation
    ("batch_size", pa.int64()),  # B when known exactly, else NULL
    ("batch_source", pa.string()),  # where the step's batch composition comes from ('sidecar' | 'trace'), or NULL
    ("b_threshold", pa.int64()),  # the kernel's split-KV threshold B_th, NULL when unknown
    ("cuda_graph", pa.bool_()),  # launched from a CUDA graph
])

_KEY = "launch-table"
_COUNTS = "launch-backend-counts"


def build(views: Sequence[LaunchView]) -> pa.Table:
    """`views` as the Arrow table of `SCHEMA`: a column at a time, each in one numpy pass over the views with no
    Python list or tuple per launch (10^6-10^7 launches: a list of a column's values costs ~40 bytes a launch), text
    dictionary-encoded; what a kernel's label decides (base name, backend, family, threshold) read once per kernel
    name."""
    n = len(views)
    if not n:
        return SCHEMA.empty_table()
    launches = list(map(_LAUNCH, views))
    kernels = list(map(_ATTENTION, launches))
    # The kernel names numbered in first-seen order, read once per kernel view shape (`Kernel._shape`: a name and
    # the shared columns), not per launch.
    names: dict[str, int] = {}  # kernel name -> its number, in first-seen order
    first: list[LaunchView] = []  # the first view of each name, in number order
    shape_rows, shape_of = first_rows(list(map(_SHAPE, kernels)))
    shape_name = np.empty(len(shape_rows), np.int64)
    for j, r in enumerate(shape_rows.tolist()):
        code = names.get(name := kernels[r].name)
        if code is None:
            code = names[name] = len(first)
            first.append(views[r])
        shape_name[j] = code
    name_codes = shape_name[shape_of]
    families = [kernel_family(v) for v in first]
    family_of_name = first_seen_codes(families)[1]
    b_th = [v.threshold.b_threshold if v.threshold is not None else None for v in first]
    per_name = functools.partial(dictionary_array, codes=name_codes)
    # Per launch, from its row (kernel ints) or attribute (C getters); what a shared object decides (the step's
    # batch, the launch model, the measurement: a few distinct among 10^6 launches) once per object.
    own = kernel_ints(kernels, ("kernel_id", "dur_ns"))
    models, model_of = distinct(list(map(_MODEL, views)))
    batches, batch_of = distinct(list(map(_BATCH, views)))
    measured, measured_of = distinct(list(map(_MEASURED, views)))
    out: dict[str, pa.Array] = {
        "pos": int64_array(np.arange(n)),
        "launch_id": int64_array(own["kernel_id"]),
        "step": int64_array(np.fromiter(map(_STEP_INDEX, views), np.int64, n)),
        "name": per_name(list(names)),
        "name_id": int64_array(name_codes),
        "kernel": per_name([v.kernel for v in first]),
        "family_key": per_name(families),
        "family_id": int64_array(family_of_name[name_codes].astype(np.int64)),
        "backend": per_name([v.backend for v in first]),
        "phase": text_array(map(_PHASE, launches), n),
        "split_kv": bool_codes(np.fromiter(map(_SPLIT_CODE.__getitem__, map(_SPLIT, launches)), np.int8, n)),
        "dur_ns": int64_array(own["dur_ns"]),
        "predicted_ns": ints_of([None if m is None else m.predicted_ns for m in models], model_of),
        "balanced_ns": ints_of([None if m is None else m.balanced_ns for m in models], model_of),
        "simulated": bools_of([m is not None and m.sim is not None and bool(m.predicted_ns) for m in models],
                              model_of),
        "sm_idle_measured": floats_of([None if x is None else x.sm_idle for x in measured], measured_of),
        "sm_idle_model": floats_of([None if m is None else m.sm_idle for m in models], model_of),
        "batch_size": ints_of([None if b is None else b.batch_size for b in batches], batch_of),
        "batch_source": dictionary_array([None if b is None else b.source for b in batches], batch_of),
        "b_threshold": int64_array(np.array([b or 0 for b in b_th], np.int64)[name_codes],
                              np.array([b is not None for b in b_th], bool)[name_codes]),
        "cuda_graph": bool_codes(np.fromiter(map(_CUDA_GRAPH, views), np.int8, n)),
    }
    return pa.table({f.name: out[f.name] for f in SCHEMA})  # text stays dictionaries (SCHEMA: their value type)


_LAUNCH, _ATTENTION, _STEP_INDEX = attrgetter("launch"), attrgetter("attention"), attrgetter("step.index")
_MODEL, _BATCH, _MEASURED, _CUDA_GRAPH = (attrgetter("model"), attrgetter("batch"), attrgetter("measured"),
                                          attrgetter("cuda_graph"))
_PHASE, _SPLIT, _SHAPE = attrgetter("phase"), attrgetter("split_kv"), attrgetter("_shape")
_SPLIT_CODE = {False: 0, True: 1, None: 2}  # a bool column's value while it is built (2: NULL)


def connect(table: pa.Table, cursor: Callable[[], duckdb.DuckDBPyConnection] | None = None
            ) -> duckdb.DuckDBPyConnection:
    """A connection with `table` registered as `attention_launches` and `kernel_baselines` (kernel_baselines.sql)
    computed from it: a cursor of the analysis's database (`cursor`) when it has one, which costs nothing and
    shares its memory limit, else a database of its own in memory (25-40 ms to open)."""
    con = cursor() if cursor is not None else duckdb.connect()
    con.register("attention_launches", table)
    con.execute(f"CREATE TEMP TABLE kernel_baselines AS {sql('kernel_baselines')}")
    return con


def launch_db(ctx: TraceAnalysis) -> tuple[duckdb.DuckDBPyConnection, Sequence[LaunchView]]:
    """The analysis's launch relation (built on first use, then shared by the rules) and the views its `pos`
    column indexes."""
    got = ctx.cache.get(_KEY)
    if got is None or got[2] is not ctx.steps or got[3] != len(ctx.steps) or got[4] is not ctx.schedule:
        release(ctx)
        views = launch_views(ctx)  # a list of its own (launch_views copies its cache)
        table = build(views)
        got = ctx.cache[_KEY] = (connect(table, ctx.cursor), views, ctx.steps, len(ctx.steps), ctx.schedule, table)
    return got[0], got[1]


def launch_relation(ctx: TraceAnalysis) -> pa.Table:
    """The analysis's launch relation as the Arrow table registered as `attention_launches` (`SCHEMA`)."""
    launch_db(ctx)
    table: pa.Table = ctx.cache[_KEY][5]
    return table


def backend_counts(ctx: TraceAnalysis) -> Counter[str]:
    """`views.backend_counts` (launches per backend, 'unknown' for none), counted over the launch relation's
    backend codes when the rules built it (no pass over 10^6 views), else over the views; kept once counted (the
    rules' runner lets the relation and the views go before the last rules, and asks after every rule)."""
    got = ctx.cache.get(_COUNTS)
    if got is not None and got[0] is ctx.steps and got[1] == len(ctx.steps) and got[2] is ctx.schedule:
        return Counter(got[3])
    out = _backend_counts(ctx)
    ctx.cache[_COUNTS] = (ctx.steps, len(ctx.steps), ctx.schedule, dict(out))
    return out


def _backend_counts(ctx: TraceAnalysis) -> Counter[str]:
    if _KEY not in ctx.cache:
        return views_backend_counts(ctx)
    column = launch_relation(ctx).column("backend").combine_chunks()
    if not pa.types.is_dictionary(column.type):  # a relation of no launch (or one built without dictionaries)
        column = column.dictionary_encode()
    codes = ints(column.indices, -1)
    per_code = np.bincount(codes[codes >= 0], minlength=len(column.dictionary)).tolist()
    out: Counter[str] = Counter()
    for word, n in zip(column.dictionary.to_pylist(), per_code, strict=True):
        if n:
            out[word or "unknown"] += n
    if column.null_count:
        out["unknown"] += column.null_count
    return out


def launch_column(ctx: TraceAnalysis, name: str) -> np.ndarray:
    """A column of the analysis's launch relation without NULLs (pos, step, dur_ns, ...) as numpy, indexed by pos:
    what a rule reads of many selected launches at once instead of asking each one's view."""
    column = launch_relation(ctx).column(name).combine_chunks()
    if column.null_count:
        raise ValueError(f"launch_column: {name} holds NULLs")
    return numbers(column)


def release(ctx: TraceAnalysis) -> None:
    """Close the analysis's launch relation, if it has one (the rules are done with it)."""
    got = ctx.cache.pop(_KEY, None)
    if got is not None:
        got[0].close()


def select_groups(ctx: TraceAnalysis, query: str, relations: Mapping[str, pa.Table] | None = None,
                  **params: Any) -> list[list[tuple[LaunchView, tuple[Any, ...]]]]:
    """Rows of the named query `query` (whose first columns are pos and the number of the launch's kernel name,
    e.g. name_id) per kernel name, in the order of that number: each row as its launch's view and the row's
    further columns."""
    rows, views = select(ctx, query, relations, **params)
    groups: dict[int, list[tuple[LaunchView, tuple[Any, ...]]]] = {}
    for row in rows:
        groups.setdefault(row[1], []).append((views[row[0]], row[2:]))
    return list(groups.values())


def select(ctx: TraceAnalysis, query: str, relations: Mapping[str, pa.Table] | None = None,
           **params: Any) -> tuple[Iterator[tuple[Any, ...]], Sequence[LaunchView]]:
    """Rows of the named query `query` over the analysis's launch relation, as tuples in the query's order, and the
    views their `pos` indexes. The result is held as Arrow columns and the rows made a batch at a time as they
    are read: a query may select every launch, and 10^7 rows as Python tuples would take gigabytes.
    `relations`: further Arrow tables the query reads (a rule's own per-launch inputs, keyed by pos), registered
    under their names while it runs."""
    result, views = select_table(ctx, query, relations, **params)
    return _rows(result), views


def select_table(ctx: TraceAnalysis, query: str, relations: Mapping[str, pa.Table] | None = None,
                 **params: Any) -> tuple[pa.Table, Sequence[LaunchView]]:
    """`select`'s result as the Arrow table it is held as (a column at a time: `numbers`), and the views."""
    con, views = launch_db(ctx)
    for name, table in (relations or {}).items():
        con.register(name, table)
    try:
        result = con.sql(sql(query), params=params).to_arrow_table()
    finally:
        for name in relations or {}:
            con.unregister(name)
    return result, views


def int64_relation(**columns: np.ndarray) -> pa.Table:
    """Int64 numpy arrays (of one length, without NULLs) as an Arrow table of those columns, from their buffers:
    a rule's own per-launch input to `select` (e.g. pos and a value)."""
    return pa.table({name: int64_array(values) for name, values in columns.items()})


# Rows of a result made into Python tuples at a time.
_BATCH_ROWS = 1 << 16


def _rows(table: pa.Table) -> Iterator[tuple[Any, ...]]:
    for batch in table.to_batches(max_chunksize=_BATCH_ROWS):
        yield from zip(*map(python_values, batch.columns), strict=True)
