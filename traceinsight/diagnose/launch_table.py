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

from collections.abc import Sequence
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.views import LaunchView, kernel_family, launch_views
from traceinsight.ingest.store import arrow_table
from traceinsight.model.occupancy import FA3
from traceinsight.queries import sql

# The columns of `attention_launches` (one row per launch of `launch_views`, in its order) and their types (text
# is held dictionary-encoded).
SCHEMA = pa.schema([
    ("pos", pa.int64()),  # position in launch_views (step order, then launch order in the step)
    ("launch_id", pa.int64()),  # the attention kernel's kernel_id
    ("step", pa.int64()),  # the step's index
    ("name", pa.string()),  # the kernel's full name (one template instance)
    ("kernel", pa.string()),  # the kernel's base name
    ("family_key", pa.string()),  # what launches are compared with (views.kernel_family)
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


def _dictionary(values: list[str | None]) -> pa.DictionaryArray:
    """Text as an Arrow dictionary array: each distinct value once (a kernel's full name runs to hundreds of
    bytes, and a long trace launches the same few kernels 10^6 times). Built from buffers, not through
    `pa.array`, which imports pandas when it is installed (see `traceinsight.ingest.store.arrow_table`)."""
    index: dict[str | None, int] = {None: -1}
    codes = np.fromiter((index.setdefault(x, len(index) - 1) for x in values), dtype=np.int32, count=len(values))
    words = [w.encode() for w in index if w is not None]
    offsets = np.zeros(len(words) + 1, dtype=np.int32)
    np.cumsum([len(w) for w in words], out=offsets[1:])
    dictionary = pa.Array.from_buffers(pa.string(), len(words),
                                       [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(words))])
    valid = codes >= 0
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    indices = pa.Array.from_buffers(pa.int32(), len(codes), [validity, pa.py_buffer(np.maximum(codes, 0))])
    return pa.DictionaryArray.from_arrays(indices, dictionary)


def build(views: Sequence[LaunchView]) -> pa.Table:
    """`views` as the Arrow table of `SCHEMA` (a column at a time: 10^6 launches; text columns dictionary-
    encoded)."""
    models = [v.model for v in views]
    measured = [v.measured for v in views]
    thresholds = [v.threshold for v in views]
    cols: dict[str, Any] = {
        "pos": list(range(len(views))),
        "launch_id": [v.launch.attention.kernel_id for v in views],
        "step": [v.step.index for v in views],
        "name": [v.launch.attention.name for v in views],
        "kernel": [v.launch.attention.kernel for v in views],
        # kernel_family is the name except for FA3 (its tile): computed only where it differs.
        "family_key": [kernel_family(v) if v.launch.attention.backend == FA3 else v.launch.attention.name
                       for v in views],
        "backend": [v.launch.attention.backend for v in views],
        "phase": [v.launch.phase for v in views],
        "split_kv": [v.launch.split_kv for v in views],
        "dur_ns": [v.launch.attention.dur_ns for v in views],
        "predicted_ns": [m.predicted_ns if m is not None else None for m in models],
        "balanced_ns": [m.balanced_ns if m is not None else None for m in models],
        "simulated": [m is not None and m.sim is not None and bool(m.predicted_ns) for m in models],
        "sm_idle_measured": [x.sm_idle if x is not None else None for x in measured],
        "sm_idle_model": [m.sm_idle if m is not None else None for m in models],
        "batch_size": [v.batch.batch_size if v.batch is not None else None for v in views],
        "batch_source": [v.batch.source if v.batch is not None else None for v in views],
        "b_threshold": [t.b_threshold if t is not None else None for t in thresholds],
        "cuda_graph": [v.cuda_graph for v in views],
    }
    if not views:
        return SCHEMA.empty_table()
    text = {f.name for f in SCHEMA if f.type == pa.string()}
    with duckdb.connect() as con:
        table = arrow_table(con, {k: v for k, v in cols.items() if k not in text})
    return pa.table({f.name: _dictionary(cols[f.name]) if f.name in text else table.column(f.name).cast(f.type)
                     for f in SCHEMA})


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


def select(ctx: TraceAnalysis, query: str, **params: Any) -> tuple[list[tuple[Any, ...]], list[LaunchView]]:
    """Rows of the named query `query` over the analysis's launch relation, and the views their `pos` indexes."""
    con, views = launch_db(ctx)
    return con.execute(sql(query), params).fetchall(), views
