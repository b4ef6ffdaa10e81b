"""Process-wide tuning for a long analysis: the `traceinsight` command's choice (its entry calls `tune()`; so do
the fleet's worker processes), never the library's. A notebook or a script that calls the library (`traceinsight.open`,
`traceinsight.pipeline.analyze`) keeps its process as it was: the garbage collector's state and thresholds, glibc's
allocator settings, pyarrow's default memory pool and the environment. A script that analyzes long traces may opt in
with `traceinsight.tuning.tune()`, which sets, for the rest of the process:

- pyarrow's default memory pool to the system allocator (mimalloc, its default, keeps freed segments for reuse);
- glibc's mmap threshold fixed at MMAP_THRESHOLD_BYTES (by default glibc raises it to the size of each large block
  freed, up to 32 MB, after which such blocks come from heaps that give memory back only from their top), and at
  STREAM_MMAP_THRESHOLD_BYTES while a file is streamed (`stream_heap`);
- the cyclic garbage collector paused while a stage builds its many objects (`gc_paused`), none of them garbage.

On the 1M-kernel export these took the peak RSS from 2.3 GB to 1.7 GB and 7 s off the 33 s of the stages
(docs/SCALE.md). Untuned, `gc_paused` and `stream_heap` change nothing."""

from __future__ import annotations

import functools
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# glibc's malloc maps an allocation of at least this many bytes on its own and unmaps it on free: memory a stage
# freed goes back to the system.
MMAP_THRESHOLD_BYTES = 1 << 20
# While a file is streamed, every chunk, batch and piece of a few MB would otherwise be a fresh mapping, its pages
# faulted in one by one: on the 2-core machine 3.3 s of system time per GB of Kineto JSON, 1.0 s with blocks this
# large taken from (and given back to) the heap, where the next chunk reuses them.
STREAM_MMAP_THRESHOLD_BYTES = 64 << 20
_M_MMAP_THRESHOLD = -3  # mallopt's parameter

_tuned = False


def tuned() -> bool:
    """Whether this process chose the tuning (`tune()`)."""
    return _tuned


def tune() -> None:
    """Tune this process for long analyses (see the module's docstring). Idempotent; not undone. Arrow's pool is
    switched when an analysis opens its database (`arrow_pool`): a command that never needs pyarrow (a report
    from kept tables) does not import it."""
    global _tuned
    _set_mmap_threshold(MMAP_THRESHOLD_BYTES)
    _tuned = True
    if "pyarrow" in sys.modules:
        arrow_pool()


def arrow_pool() -> None:
    """In a tuned process, pyarrow's default memory pool set to the system allocator (each analysis's database
    asks, `ingest.store.TraceDB`); untuned, nothing."""
    if not _tuned:
        return
    import pyarrow as pa

    if pa.default_memory_pool().backend_name != "system":
        pa.set_memory_pool(pa.system_memory_pool())


@functools.cache
def _mallopt() -> Any:
    """glibc's mallopt, or None (other C libraries)."""
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None


def _set_mmap_threshold(n: int) -> None:
    """Have glibc map allocations of `n` bytes or more on their own (fixed: no dynamic threshold); no-op elsewhere."""
    mallopt = _mallopt()
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, n)


@contextmanager
def stream_heap() -> Iterator[None]:
    """In a tuned process, while a file is streamed: blocks of a few MB from the heap (STREAM_MMAP_THRESHOLD_BYTES),
    MMAP_THRESHOLD_BYTES again afterwards. Untuned: nothing."""
    if not _tuned:
        yield
        return
    _set_mmap_threshold(STREAM_MMAP_THRESHOLD_BYTES)
    try:
        yield
    finally:
        _set_mmap_threshold(MMAP_THRESHOLD_BYTES)


@contextmanager
def gc_paused() -> Iterator[None]:
    """In a tuned process: the cyclic garbage collector held off while a stage builds its 10^5-10^7 small objects
    (reference counting still frees everything dropped), its previous state restored after. Every full collection
    rescans every live object: parsing a 27 MB trace spent a third of its time there, a plan or a simulation as much
    as the building itself. Untuned: nothing (another thread of a notebook's process may rely on the collector)."""
    if not _tuned:
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
