"""Parsing a Kineto trace's batches in worker processes (`TRACEINSIGHT_WORKERS`; off by default: on the 2-core
machines measured they did not pay), their rows merged in batch order so that the result does not depend on the
number of workers."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from traceinsight.ingest.base import Columns
from traceinsight.ingest.byte_stream import GZIP_MAGIC, Repairs
from traceinsight.ingest.host_ops import HostOps
from traceinsight.ingest.json_stream import Batch
from traceinsight.ingest.kineto_batch import batch_events
from traceinsight.ingest.kineto_events import Tables, read_events
from traceinsight.ingest.kineto_prefilter import kept_elements, learn
from traceinsight.tuning import gc_paused

# Inputs at least this large (uncompressed bytes, estimated) are parsed by worker processes when read() is not
# told how many to use; gzip files are counted at GZIP_RATIO times their size.
PARALLEL_MIN_BYTES = 96 << 20
GZIP_RATIO = 12
# Batches handed to the workers ahead of the one being merged, per worker (bounds memory).
AHEAD_PER_WORKER = 2


def worker_count(path: Path, workers: int | None) -> int:
    if workers is None:
        setting = os.environ.get("TRACEINSIGHT_WORKERS", "0").strip().lower()
        if setting != "auto":
            return max(0, int(setting)) if setting.isdigit() else 0
    else:
        return max(0, workers)
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            if fh.read(2) == GZIP_MAGIC:
                size *= GZIP_RATIO
    except OSError:
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cpus if size >= PARALLEL_MIN_BYTES and cpus > 1 else 0


def read_parallel(batches: Iterator[Batch], path: Path, n: int, t: Tables, repairs: Repairs) -> int:
    """Parse `batches` in `n` worker processes (spawned: this process may hold DuckDB's threads), merging
    their rows into `t` in batch order; return the number of array elements read."""
    import multiprocessing
    from collections import deque
    from concurrent.futures import Future, ProcessPoolExecutor

    pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"))
    pending: deque[Future[_Part]] = deque()
    count = 0
    known: dict[bytes, dict[bytes, bool]] = {}
    try:
        for batch in batches:
            learned = learn(known, batch)
            pending.append(pool.submit(_parse_batch, str(path), batch, None if learned is None else dict(learned)))
            while len(pending) >= AHEAD_PER_WORKER * n:
                count += _merge(t, repairs, pending.popleft().result())
        while pending:
            count += _merge(t, repairs, pending.popleft().result())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return count


# What a worker returns for one batch: its tables' columns, host operations, skip counts, repairs and number of
# elements.
_Part = tuple[dict[str, Columns], HostOps, Counter[tuple[str, str]], Repairs, int]
_TABLES = ("kernels", "memops", "launches", "ranges", "collectives")


def _parse_batch(path: str, batch: Batch, learned: dict[bytes, bool] | None) -> _Part:
    """Worker: the rows of one batch; `learned`: the prefixes of skipped elements learned up to it (`learn`)."""
    repairs = Repairs()
    t = Tables()
    with gc_paused():
        events, count = batch_events(batch, Path(path), repairs, kept_elements(batch, learned))
        read_events(events, t)
        t.host_ops.scan(batch.data, batch.sep, batch.braces)
    return {name: getattr(t, name) for name in _TABLES}, t.host_ops, t.skipped, repairs, count


def _merge(t: Tables, repairs: Repairs, part: _Part) -> int:
    """Append a worker's rows to `t`; return its number of elements."""
    cols, host_ops, skipped, fixed, count = part
    t.host_ops.extend(host_ops)
    intern = t.names.setdefault
    for name in _TABLES:
        into = getattr(t, name)
        for col, values in cols[name].items():
            if col == "name":
                values = [intern(v, v) for v in values]
            into[col].extend(values)
    t.skipped.update(skipped)
    repairs.update(fixed)
    return count
