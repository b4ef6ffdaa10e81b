"""Kineto / torch.profiler JSON traces (`.json`, `.json.gz`, `.pt.trace.json.gz`) -> normalized tables.

Both the current format (categories `kernel`, `gpu_memcpy`, `cuda_runtime`, `user_annotation`, ...) and the
2021 one (`Kernel`, `Memcpy`, `Runtime`, `Operator`, GPU `tid` as the string "stream 7") are read.

Units: Kineto writes `ts` and `dur` in microseconds (floats with three decimals, or integers in older files)
on its own clock (relative to `baseTimeNanoseconds` when the file has that key). Rows keep that clock, in
int64 nanoseconds: `start_ns = round(ts * 1000)` and `end_ns = start_ns + round(dur * 1000)`, so that
`dur_ns` is exactly the duration the file states (rounding `ts + dur` in floating point can be 1 ns off).

`read(path)` streams the file (`json_stream`): memory holds a few 2 MB chunks plus the rows kept, never the
document; events of categories the tables do not use are dropped by their first bytes without being parsed, and
flow events (ph s/t/f: arrows, no duration) are never read. Three threads: one reads (and gunzips) the file, one
cuts it into batches and finds the kept events with numpy (`_kept_spans`), the caller parses them; about 4-5 CPU-s
per GB of uncompressed JSON on the 2-core development machine (docs/SCALE.md). `load_json` + `from_document`
parse a document whole (sidecars, odd layouts) and give the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from traceinsight.errors import FormatError
from traceinsight.ingest.base import Ingest
from traceinsight.ingest.byte_stream import GZIP_MAGIC, UTF8_BOM, Repairs, byte_chunks, read_ahead
from traceinsight.ingest.host_ops import HostOps
from traceinsight.ingest.json_repair import REPAIRS_KEY, load_json, parse_text
from traceinsight.ingest.json_stream import ArrayStream, Batch, NotAnArray
from traceinsight.ingest.kineto_batch import batch_events
from traceinsight.ingest.kineto_events import Tables, read_events
from traceinsight.ingest.kineto_prefilter import Kept, kept_elements, learn
from traceinsight.ingest.kineto_tables import to_ingest
from traceinsight.ingest.kineto_workers import read_parallel, worker_count
from traceinsight.tuning import gc_paused, stream_heap

__all__ = ["GZIP_MAGIC", "UTF8_BOM", "REPAIRS_KEY", "from_document", "load_json", "read"]


# ================================================================== streaming
def read(path: Path, workers: int | None = None) -> Ingest | None:
    """Stream a Kineto trace (plain or gzipped JSON object with a `traceEvents` array) into the normalized
    tables, holding in memory a few chunks of the file plus the rows kept; return None when the file is JSON
    but not laid out as such an object (the caller then parses it whole with `load_json`).

    Events of categories the tables do not use (cpu_op, python_function, flows, ...) are recognised from their
    first bytes and never parsed; the others are parsed in batches with orjson, and batches orjson rejects go
    through the same repairs as `load_json`. The rows are the same as `from_document(load_json(path))`.

    `workers`: processes parsing batches (0 or 1: none, in this process); None: $TRACEINSIGHT_WORKERS, default
    0. "auto" there: one per CPU for inputs of PARALLEL_MIN_BYTES or more (gzip counted at GZIP_RATIO times its
    size). Reading and gunzip stay in this process (a thread); batches are parsed by the workers and their rows
    appended in order, so the result does not depend on the number of workers. Workers are spawned processes:
    a script calling this with workers needs the `if __name__ == "__main__":` guard. On the 2-core machines
    measured (benchmarks/ingest_scale.py) they did not pay: off by default."""
    repairs = Repairs()
    chunks = read_ahead(byte_chunks(path, repairs, cut_ok=True))
    stream = ArrayStream(path, chunks, b"traceEvents")
    t = Tables()
    n = worker_count(path, workers)
    prepared = None
    try:
        with gc_paused(), stream_heap():
            if n > 1:
                n_events = read_parallel(stream.batches(), path, n, t, repairs)
            else:
                n_events = 0
                # Cutting batches and finding the kept elements run a batch ahead in a thread: their scans are
                # numpy's, which releases the GIL, so they overlap with parsing on the other core.
                prepared = read_ahead(_prepare(stream.batches(), t.host_ops), name="traceinsight-scan")
                for batch, kept in prepared:
                    events, count = batch_events(batch, path, repairs, kept)
                    n_events += count
                    read_events(events, t)
    except NotAnArray:
        return None
    finally:
        if prepared is not None:
            prepared.close()  # type: ignore[attr-defined]
        chunks.close()  # type: ignore[attr-defined]
    doc = parse_text(stream.rest, repairs, path, stream.rest_offset)
    ingest = to_ingest(doc, t, path, repairs.messages())
    if stream.cut_at is not None:
        ingest.warnings.insert(
            0,
            f"{path}: the data ends at byte {stream.cut_at} inside traceEvents (file cut short?): kept the "
            f"{n_events} events before the cut",
        )
    return ingest


def _prepare(batches: Iterator[Batch], host_ops: HostOps) -> Iterator[tuple[Batch, Kept]]:
    """Each batch with its kept elements (`kept_elements`), for `read`'s scanning thread, its host operations
    added to `host_ops` (found by their bytes, never parsed: `HostOps.scan`). The prefixes of skipped
    elements learned from each batch's start are kept for the batches after it (per separator): a trace's
    sections (operators, then runtime calls and kernels, then flows) are longer than a batch, and a batch whose
    first 64 KB show no operator would otherwise parse every operator and flow it holds (on the replicas of the
    sweep trace, 42 % of the elements parsed)."""
    known: dict[bytes, dict[bytes, bool]] = {}
    for batch in batches:
        kept = kept_elements(batch, learn(known, batch))
        host_ops.scan(batch.data, batch.sep, batch.braces)
        yield batch, kept


def from_document(doc: dict[str, Any], path: Path) -> Ingest:
    """Turn a parsed Kineto trace (a JSON object with `traceEvents`) into the normalized tables: devices (from
    deviceProperties), kernels, memops, launches (host calls that launched them) and ranges (record_function
    annotations, ProfilerStep#N, and their GPU projections). Unusable events are skipped and counted in
    `Ingest.warnings`, never fatal."""
    events = doc.get("traceEvents")
    if type(events) is not list:
        raise FormatError(f"{path}: traceEvents is not a list of events")
    t = Tables()
    read_events(events, t)
    t.host_ops.add_events(events)
    repairs = doc.get(REPAIRS_KEY)
    return to_ingest(doc, t, path, list(repairs) if type(repairs) is list else [])
