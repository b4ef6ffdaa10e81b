"""FlashInfer 0.6.1 batch decode on a paged KV cache: wrappers per path, paged layouts, the planner's decision
read back from the wrapper, and eager or CUDA-graph runners. Needs torch + flashinfer on a CUDA device.

The planner's decision is FlashInfer's private `wrapper._plan_info` (layouts in ../shared/traces/README.md):
- CUDA-core decode, 10 ints: [0] padded_batch_size, [7] kv_chunk_size_ptr_offset, [8] enable_cuda_graph, [9] split_kv
- FA2 tensor-core, 15 ints: [0] padded_batch_size, [9] kv_chunk_size_ptr_offset, [13] enable_cuda_graph, [14] split_kv
- SM90 (what backend="auto" picks on Hopper for bf16), 9 ints: offsets only; never splits KV.
The chunk length (tokens) is the int32 the planner wrote at kv_chunk_size_ptr_offset of the pinned host copy of
the int workspace (`wrapper._pin_memory_int_workspace_buffer`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .config import PATHS, ModelShape, PathSpec
from .runtime import Runtime, torch_dtype
from .sidecar import PlanRecord

MiB = 1 << 20
INT_WORKSPACE_BYTES = 8 * MiB  # what the wrapper allocates for its int workspace (plan metadata)


@dataclass
class PagedBatch:
    """A batch's page table on the host (int32 tensors): what `wrapper.plan` takes."""

    kv_lens: list[int]
    indptr: Any
    indices: Any
    last_page_len: Any


def pages_for(kv_len: int, page_size: int) -> int:
    """Pages a request of `kv_len` tokens occupies (at least one)."""
    return max(1, math.ceil(kv_len / page_size))


def paged_batch(rt: Runtime, kv_lens: Sequence[int], page_size: int,
                pages: Sequence[Sequence[int]] | None = None) -> PagedBatch:
    """The page table of `kv_lens`: each request's pages are `pages[i]` (its first pages_for(len) entries), or,
    when `pages` is None, consecutive pages from 0 in request order."""
    t = rt.torch
    counts = [pages_for(n, page_size) for n in kv_lens]
    indptr = [0]
    for c in counts:
        indptr.append(indptr[-1] + c)
    if pages is None:
        indices = t.arange(indptr[-1], dtype=t.int32)
    else:
        flat: list[int] = []
        for own, c in zip(pages, counts, strict=True):
            flat.extend(own[:c])
        indices = t.tensor(flat, dtype=t.int32)
    last = [n - (c - 1) * page_size for n, c in zip(kv_lens, counts, strict=True)]
    return PagedBatch(list(kv_lens), t.tensor(indptr, dtype=t.int32), indices, t.tensor(last, dtype=t.int32))


class DecodeBench:
    """One model shape's KV cache (random values, never zeros), workspace and wrappers."""

    def __init__(self, rt: Runtime, shape: ModelShape, max_pages: int, workspace_mb: int, seed: int) -> None:
        t = rt.torch
        self.rt, self.shape, self.max_pages = rt, shape, max_pages
        self.device = t.device("cuda", t.cuda.current_device())
        self.q_dtype = torch_dtype(rt, shape.q_dtype)
        self.kv_dtype = torch_dtype(rt, shape.kv_dtype)
        gen = t.Generator(device=self.device).manual_seed(seed)
        dims = (max_pages, 2, shape.page_size, shape.kv_heads, shape.head_dim)  # NHD layout
        if self.kv_dtype.itemsize == 1:  # fp8: draw in bf16, page block by page block to bound the temporary
            self.kv = t.empty(dims, dtype=self.kv_dtype, device=self.device)
            block = 4096
            for lo in range(0, max_pages, block):
                hi = min(max_pages, lo + block)
                self.kv[lo:hi] = t.randn((hi - lo, *dims[1:]), dtype=t.bfloat16, device=self.device,
                                         generator=gen).to(self.kv_dtype)
        else:
            self.kv = t.randn(dims, dtype=self.kv_dtype, device=self.device, generator=gen)
        self.workspace = t.zeros(workspace_mb * MiB, dtype=t.uint8, device=self.device)
        self._gen = gen

    def wrapper(self, path: str, graph_batch: int | None = None) -> Any:
        """A decode wrapper for `path`; with `graph_batch`, the CUDA-graph variant with preallocated buffers
        for exactly that batch size (as SGLang builds one per captured size)."""
        t, spec = self.rt.torch, PATHS[path]
        assert self.rt.flashinfer is not None  # require_gpu() imported it (a FlashInfer run)
        cls = self.rt.flashinfer.BatchDecodeWithPagedKVCacheWrapper
        if graph_batch is None:
            return cls(self.workspace, "NHD", use_tensor_cores=spec.use_tensor_cores, backend=spec.backend)
        return cls(
            self.workspace, "NHD", use_cuda_graph=True, use_tensor_cores=spec.use_tensor_cores,
            paged_kv_indptr_buffer=t.empty(graph_batch + 1, dtype=t.int32, device=self.device),
            paged_kv_indices_buffer=t.empty(self.max_pages, dtype=t.int32, device=self.device),
            paged_kv_last_page_len_buffer=t.empty(graph_batch, dtype=t.int32, device=self.device),
            backend=spec.backend,
        )

    def plan(self, wrapper: Any, batch: PagedBatch, disable_split_kv: bool = False) -> None:
        """Plan `batch`; `disable_split_kv` (FA2 tensor-core decode only: 0.6.1's CUDA-core planner takes no such
        argument) keeps every request in one KV chunk."""
        s = self.shape
        kw = {"disable_split_kv": True} if disable_split_kv else {}
        wrapper.plan(batch.indptr, batch.indices, batch.last_page_len, s.qo_heads, s.kv_heads, s.head_dim,
                     s.page_size, q_data_type=self.q_dtype, kv_data_type=self.kv_dtype, **kw)

    def query(self, batch_size: int) -> Any:
        t, s = self.rt.torch, self.shape
        return t.randn((batch_size, s.qo_heads, s.head_dim), dtype=self.q_dtype, device=self.device,
                       generator=self._gen)

    def eager(self, wrapper: Any, batch_size: int) -> Callable[[], None]:
        """A callable that runs one decode step of `batch_size` fresh random queries."""
        q = self.query(batch_size)
        out = self.rt.torch.empty_like(q)
        kv = self.kv

        def run() -> None:
            wrapper.run(q, kv, out=out)

        return run

    def graph(self, wrapper: Any, batch_size: int) -> Callable[[], None]:
        """Capture one decode step into a CUDA graph (after a warm-up on a side stream); return its replay.
        Re-planning the wrapper later updates its buffers in place, which the replay then reads."""
        t = self.rt.torch
        run = self.eager(wrapper, batch_size)
        side = t.cuda.Stream()
        side.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(side):
            run()
        t.cuda.current_stream().wait_stream(side)
        g = t.cuda.CUDAGraph()
        with t.cuda.graph(g):
            run()
        keep = (g, run)  # the graph reads the wrapper's buffers and `run`'s query/output: keep them all alive

        def replay() -> None:
            keep[0].replay()

        return replay


def backend_name(wrapper: Any, spec: PathSpec) -> str:
    """The sidecar's backend of a planned wrapper: the CUDA-core kernel, FA2, or SM90 (`auto` on Hopper)."""
    if not spec.use_tensor_cores:
        return "flashinfer-cuda-core"
    return "flashinfer-fa2" if getattr(wrapper, "_backend", spec.backend) == "fa2" else "flashinfer-sm90"


def _int32_at(wrapper: Any, offset: int) -> int | None:
    """The int32 the planner wrote at byte `offset` of the pinned int workspace (None if absent or <= 0)."""
    buf = getattr(wrapper, "_pin_memory_int_workspace_buffer", None)
    if buf is None or offset < 0 or offset + 4 > buf.numel():
        return None
    value = int.from_bytes(bytes(buf[offset:offset + 4].tolist()), "little", signed=True)
    return value if value > 0 else None


def read_plan(wrapper: Any, spec: PathSpec) -> tuple[str, PlanRecord]:
    """(backend, plan) as the planner decided for the last `plan()` of `wrapper`."""
    info = [int(x) for x in wrapper._plan_info]
    backend = backend_name(wrapper, spec)
    if backend == "flashinfer-cuda-core" and len(info) == 10:
        return backend, PlanRecord(info[0], bool(info[9]), _int32_at(wrapper, info[7]), info)
    if backend == "flashinfer-fa2" and len(info) == 15:
        return backend, PlanRecord(info[0], bool(info[14]), _int32_at(wrapper, info[9]), info)
    return backend, PlanRecord(None, False, None, info)
