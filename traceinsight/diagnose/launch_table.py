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


def _codes(values: list[str | None]) -> tuple[list[str | None], np.ndarray]:
    """The distinct values (in first-seen order) and each value's index among them."""
    index: dict[str | None, int] = {}
    codes = np.fromiter((index.setdefault(x, len(index)) for x in values), dtype=np.int32, count=len(values))
    return list(index), codes


def _dictionary(words: list[str | None], codes: np.ndarray) -> pa.DictionaryArray:
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
    if not views:
        return SCHEMA.empty_table()
    steps, launches, _, batches, models, measured, graphs = zip(*views, strict=True)
    kernels = [launch.attention for launch in launches]
    names, name_codes = _codes([k.name for k in kernels])
    _, first = np.unique(name_codes, return_index=True)  # codes count up from 0 in first-seen order
    per_name = [views[i] for i in first.tolist()]  # the first view of each name, in name-code order
    phases, phase_codes = _codes([launch.phase for launch in launches])
    sources, source_codes = _codes([b.source if b is not None else None for b in batches])
    ident = np.arange(len(names), dtype=np.int32)
    text = {
        "name": _dictionary(names, name_codes),
        "kernel": _dictionary([v.kernel for v in per_name], name_codes),
        # kernel_family is the name except for FA3 (its tile)
        "family_key": _dictionary([kernel_family(v) for v in per_name], name_codes),
        "backend": _dictionary([v.backend for v in per_name], name_codes),
        "phase": _dictionary(phases, phase_codes),
        "batch_source": _dictionary(sources, source_codes),
    }
    b_th = np.array([v.threshold.b_threshold if v.threshold is not None and v.threshold.b_threshold is not None
                     else -1 for v in per_name], dtype=np.int64)[name_codes] if len(ident) else None
    cols: dict[str, Any] = {
        "launch_id": [k.kernel_id for k in kernels],
        "step": [st.index for st in steps],
        "split_kv": [launch.split_kv for launch in launches],
        "dur_ns": [k.dur_ns for k in kernels],
        "predicted_ns": [m.predicted_ns if m is not None else None for m in models],
        "balanced_ns": [m.balanced_ns if m is not None else None for m in models],
        "simulated": [m is not None and m.sim is not None and bool(m.predicted_ns) for m in models],
        "sm_idle_measured": [x.sm_idle if x is not None else None for x in measured],
        "sm_idle_model": [m.sm_idle if m is not None else None for m in models],
        "batch_size": [b.batch_size if b is not None else None for b in batches],
        "cuda_graph": list(graphs),
    }
    with duckdb.connect() as con:
        table = arrow_table(con, cols)
    out: dict[str, Any] = {}
    for f in SCHEMA:
        if f.name == "pos":
            out[f.name] = pa.Array.from_buffers(pa.int64(), len(views),
                                                [None, pa.py_buffer(np.arange(len(views), dtype=np.int64))])
        elif f.name == "b_threshold":
            assert b_th is not None
            known = b_th >= 0
            out[f.name] = pa.Array.from_buffers(pa.int64(), len(views), [
                None if known.all() else pa.py_buffer(np.packbits(known, bitorder="little")),
                pa.py_buffer(np.maximum(b_th, 0))])
        else:
            out[f.name] = text[f.name] if f.name in text else table.column(f.name).cast(f.type)
    return pa.table(out)  # the text columns stay dictionaries (SCHEMA gives their value type)


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
