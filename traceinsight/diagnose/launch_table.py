"""The attention launches of one analysis as a relation the rules select their candidates from with named SQL
(traceinsight/queries): one row per `LaunchView`, built once per analysis as an Arrow table and registered as
`attention_launches`, beside `kernel_baselines` (each kernel family's typical time), in a DuckDB connection of
its own.

Why a connection of its own (in memory) and not the store's: the rows are derived from the model stage's Python
objects (steps, batches, launch models), not from stored tables, so no query here joins a stored table; rules
also run on analyses that have no store (contexts built by hand, saved reports); and a fleet analyses many
traces in one store, where a registered name would have to be made unique per trace and dropped after. The
Arrow table is registered, not copied. `release(ctx)` closes the connection when the rules are done.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.views import LaunchView, kernel_family, launch_views
from traceinsight.ingest.store import arrow_table
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


def _codes(values: Sequence[str | None]) -> tuple[list[str | None], np.ndarray]:
    """The distinct values (in first-seen order) and each value's index among them."""
    distinct = list(dict.fromkeys(values))
    index = {w: i for i, w in enumerate(distinct)}
    return distinct, np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))


def _int64(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """An int64 numpy array as an Arrow array (NULL where `valid` is False), from its buffer."""
    validity = None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.int64(), len(values), [validity, pa.py_buffer(values.astype(np.int64))])


def _attr(objs: tuple[Any, ...], name: str) -> list[Any] | None:
    """Each object's attribute `name` (None for a None object); None for the whole column when every object is
    None (a trace without a sidecar or Nsight Compute: a column of NULLs, at no cost per launch)."""
    if objs.count(None) == len(objs):
        return None
    get = attrgetter(name)
    return [None if o is None else get(o) for o in objs]


def _dictionary(words: Sequence[str | None], codes: np.ndarray) -> pa.DictionaryArray:
    """Text as an Arrow dictionary array: row i holds words[codes[i]] (each distinct word stored once: a
    kernel's full name runs to hundreds of bytes, and a long trace launches the same few kernels 10^6 times).
    Built from buffers, not through `pa.array`, which imports pandas when it is installed (see
    `traceinsight.ingest.store.arrow_table`)."""
    distinct, remap = _codes(words)  # words may repeat (a family key shared by names) or hold None
    texts = [w.encode() for w in distinct if w is not None]
    offsets = np.zeros(len(texts) + 1, dtype=np.int32)
    np.cumsum([len(t) for t in texts], out=offsets[1:])
    dictionary = pa.Array.from_buffers(pa.string(), len(texts),
                                       [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(texts))])
    null = distinct.index(None) if None in distinct else len(distinct)
    # distinct index -> dictionary index (the texts skip None), or -1 for None
    to_text = np.array([-1 if i == null else i - (i > null) for i in range(len(distinct))], dtype=np.int32)
    rows = to_text[remap][codes] if len(codes) else np.zeros(0, dtype=np.int32)
    valid = rows >= 0
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    indices = pa.Array.from_buffers(pa.int32(), len(rows), [validity, pa.py_buffer(np.maximum(rows, 0))])
    return pa.DictionaryArray.from_arrays(indices, dictionary)


def build(views: Sequence[LaunchView]) -> pa.Table:
    """`views` as the Arrow table of `SCHEMA`: a column at a time (10^6 launches), text dictionary-encoded; what
    a kernel's label decides (base name, backend, family, threshold) read once per kernel name."""
    n = len(views)
    if not n:
        return SCHEMA.empty_table()
    steps, launches, _, batches, models, measured, graphs = zip(*views, strict=True)
    kernels = list(map(attrgetter("attention"), launches))
    names, name_codes = _codes(list(map(attrgetter("name"), kernels)))
    _, first = np.unique(name_codes, return_index=True)  # codes count up from 0 in first-seen order
    per_name = [views[i] for i in first.tolist()]  # the first view of each name, in name-code order
    families = [kernel_family(v) for v in per_name]
    family_of_name = _codes(families)[1]
    b_th = [v.threshold.b_threshold if v.threshold is not None else None for v in per_name]
    sources = _attr(batches, "source")
    out: dict[str, Any] = {
        "pos": _int64(np.arange(n)),
        "launch_id": _int64(np.fromiter(map(attrgetter("kernel_id"), kernels), np.int64, n)),
        "step": _int64(np.fromiter(map(attrgetter("index"), steps), np.int64, n)),
        "name": _dictionary(names, name_codes),
        "kernel": _dictionary([v.kernel for v in per_name], name_codes),
        "name_id": _int64(name_codes),
        "family_key": _dictionary(families, name_codes),
        "family_id": _int64(family_of_name[name_codes]),
        "backend": _dictionary([v.backend for v in per_name], name_codes),
        "phase": _dictionary(*_codes(list(map(attrgetter("phase"), launches)))),
        "dur_ns": _int64(np.fromiter(map(attrgetter("dur_ns"), kernels), np.int64, n)),
        "batch_source": _dictionary(*_codes(sources if sources is not None else [None] * n)),
        "b_threshold": _int64(np.array([b or 0 for b in b_th], np.int64)[name_codes],
                              np.array([b is not None for b in b_th], bool)[name_codes]),
    }
    cols: dict[str, list[Any] | None] = {
        "split_kv": list(map(attrgetter("split_kv"), launches)),
        "predicted_ns": _attr(models, "predicted_ns"),
        "balanced_ns": _attr(models, "balanced_ns"),
        "simulated": ([m is not None and m.sim is not None and bool(m.predicted_ns) for m in models]
                      if models.count(None) < n else [False] * n),
        "sm_idle_measured": _attr(measured, "sm_idle"),
        "sm_idle_model": _attr(models, "sm_idle"),
        "batch_size": _attr(batches, "batch_size"),
        "cuda_graph": list(graphs),
    }
    with duckdb.connect() as con:
        table = arrow_table(con, {k: v for k, v in cols.items() if v is not None})
    for f in SCHEMA:
        if f.name in cols:
            out[f.name] = pa.nulls(n, f.type) if cols[f.name] is None else table.column(f.name).cast(f.type)
    return pa.table({f.name: out[f.name] for f in SCHEMA})  # text stays dictionaries (SCHEMA: their value type)


def connect(table: pa.Table) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with `table` registered as `attention_launches` and `kernel_baselines`
    (kernel_baselines.sql) computed from it."""
    con = duckdb.connect()
    con.register("attention_launches", table)
    con.execute(f"CREATE TEMP TABLE kernel_baselines AS {sql('kernel_baselines')}")
    return con


def launch_db(ctx: TraceAnalysis) -> tuple[duckdb.DuckDBPyConnection, list[LaunchView]]:
    """The analysis's launch relation (built on first use, then shared by the rules) and the views its `pos`
    column indexes."""
    views = launch_views(ctx)
    got = ctx.cache.get(_KEY)
    if got is None or got[1] is not ctx.steps or got[2] != len(views) or got[3] is not ctx.schedule:
        release(ctx)
        got = ctx.cache[_KEY] = (connect(build(views)), ctx.steps, len(views), ctx.schedule)
    return got[0], views


def release(ctx: TraceAnalysis) -> None:
    """Close the analysis's launch relation, if it has one (the rules are done with it)."""
    got = ctx.cache.pop(_KEY, None)
    if got is not None:
        got[0].close()


def select_groups(ctx: TraceAnalysis, query: str, relations: Mapping[str, pa.Table] | None = None,
                  **params: Any) -> list[list[tuple[LaunchView, tuple[Any, ...]]]]:
    """Rows of the named query `query` (whose first columns are pos, name, name_id) per kernel name, in the order
    the names first appear: each row as its launch's view and the row's further columns."""
    rows, views = select(ctx, query, relations, **params)
    groups: dict[int, list[tuple[LaunchView, tuple[Any, ...]]]] = {}
    for row in rows:
        groups.setdefault(row[2], []).append((views[row[0]], row[3:]))
    return list(groups.values())


def select(ctx: TraceAnalysis, query: str, relations: Mapping[str, pa.Table] | None = None,
           **params: Any) -> tuple[list[tuple[Any, ...]], list[LaunchView]]:
    """Rows of the named query `query` over the analysis's launch relation, and the views their `pos` indexes.
    `relations`: further Arrow tables the query reads (a rule's own per-launch inputs, keyed by pos), registered
    under their names while it runs."""
    con, views = launch_db(ctx)
    for name, table in (relations or {}).items():
        con.register(name, table)
    try:
        got = con.execute(sql(query), params).fetchnumpy()  # by column: 10^5 rows convert twice as fast
    finally:
        for name in relations or {}:
            con.unregister(name)
    return list(zip(*(column.tolist() for column in got.values()), strict=True)), views


def int64_relation(**columns: np.ndarray) -> pa.Table:
    """Int64 numpy arrays (of one length, without NULLs) as an Arrow table of those columns, from their buffers:
    a rule's own per-launch input to `select` (e.g. pos and a value)."""
    return pa.table({name: _int64(values) for name, values in columns.items()})
