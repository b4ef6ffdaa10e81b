"""Types shared by the planners: a decode batch, the work items a planner makes of it, and the plan."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from typing import NamedTuple

from traceinsight.tuning import gc_paused as gc_paused  # the planners' and the simulator's


def ceil_div(a: int, b: int) -> int:
    """Integer ceiling division for non-negative `a` and positive `b`."""
    return -(-a // b)


@dataclass(frozen=True)
class Batch:
    """One decode step's batch composition and model shape.

    kv_lens: every request's KV length (tokens); page_size: tokens per KV page; qo_heads / kv_heads: query and
    KV heads on this GPU (after tensor parallelism); head_dim: elements per head; qo_lens: query tokens per
    request (None: 1 each, i.e. decode); kv_dtype_bytes: bytes per KV element (2 for bf16, 1 for fp8).
    """

    kv_lens: tuple[int, ...]
    page_size: int
    qo_heads: int
    kv_heads: int
    head_dim: int
    qo_lens: tuple[int, ...] | None = None
    kv_dtype_bytes: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "kv_lens", tuple(int(x) for x in self.kv_lens))
        if self.qo_lens is not None:
            object.__setattr__(self, "qo_lens", tuple(int(x) for x in self.qo_lens))
            if len(self.qo_lens) != len(self.kv_lens):
                raise ValueError("qo_lens and kv_lens must have one entry per request")
        if not self.kv_lens:
            raise ValueError("a batch needs at least one request")
        if min(self.kv_lens) < 0:
            raise ValueError("KV lengths must be non-negative")
        if self.page_size <= 0 or self.kv_heads <= 0 or self.qo_heads <= 0 or self.head_dim <= 0:
            raise ValueError("page_size, heads and head_dim must be positive")
        if self.qo_heads % self.kv_heads:
            raise ValueError(f"qo_heads {self.qo_heads} is not a multiple of kv_heads {self.kv_heads}")

    @property
    def batch_size(self) -> int:
        """Number of requests B."""
        return len(self.kv_lens)

    @property
    def group_size(self) -> int:
        """GQA group G = H_q / H_kv."""
        return self.qo_heads // self.kv_heads

    @property
    def query_lens(self) -> tuple[int, ...]:
        """Query tokens per request (1 each for decode)."""
        return self.qo_lens if self.qo_lens is not None else (1,) * len(self.kv_lens)

    @property
    def pages(self) -> tuple[int, ...]:
        """KV pages per request, ceil(kv_len / page_size)."""
        return tuple(ceil_div(n, self.page_size) for n in self.kv_lens)

    @property
    def total_kv_tokens(self) -> int:
        """Sum of the KV lengths (tokens)."""
        return sum(self.kv_lens)

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V one KV head holds per token (2 * head_dim * kv_dtype_bytes)."""
        return 2 * self.head_dim * self.kv_dtype_bytes


class WorkItem(NamedTuple):
    """One unit of work a CTA (or a persistent CTA's loop iteration) does.

    request: index into Batch.kv_lens; kv_head: KV head (None: all heads); chunk_index: which KV chunk of the
    request; kv_start / kv_tokens: the chunk's token range; qo_head: query head for backends that schedule
    query heads separately (FlashInfer SM90), else None; qo_tile: query tile index; cta: linear CTA index
    x + gx * (y + gy * z) for non-persistent grids, position in the pull order for persistent ones;
    worker: the persistent CTA a static scheduler assigned it to (None: pulled dynamically / not persistent).

    A named tuple: a serving trace's plans hold 10^6 items, which the planners make at C speed from plain tuples
    (`work_items`); as a frozen dataclass each cost a Python-level constructor call.
    """

    request: int
    kv_head: int | None
    chunk_index: int
    kv_start: int
    kv_tokens: int
    qo_head: int | None = None
    qo_tile: int = 0
    cta: int = 0
    worker: int | None = None


@dataclass(frozen=True)
class Plan:
    """A planner's decision for one launch.

    work_items: in launch order (linear CTA order, or pull order for persistent grids); chunk_tokens: KV chunk
    length in tokens (None when it varies per request); split_kv: the planner's split flag (as FlashInfer's
    plan_info reports it); padded_batch_size: grid.x the planner pads to (None for persistent backends);
    grid: launch grid (x, y, z); merge: a merge/combine kernel follows; persistent: CTAs loop over work items
    (grid = workers) instead of one CTA per item; max_grid: the CTA count the planner targets;
    splits: number of KV chunks per request; details: planner internals (ints/floats/bools, None where unset)
    for reports.
    """

    backend: str
    batch: Batch
    work_items: tuple[WorkItem, ...]
    chunk_tokens: int | None
    split_kv: bool
    padded_batch_size: int | None
    grid: tuple[int, int, int]
    merge: bool
    persistent: bool
    max_grid: int
    splits: tuple[int, ...]
    details: Mapping[str, int | float | bool | None] = field(default_factory=dict, compare=False)

    def __hash__(self) -> int:
        # The fields compared, hashed once per plan: a plan keys the simulation memo, and hashing its work items
        # (tens of thousands of WorkItems) on every lookup was a tenth of a serving trace's analysis.
        h: int | None = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.backend, self.batch, self.work_items, self.chunk_tokens, self.split_kv,
                      self.padded_batch_size, self.grid, self.merge, self.persistent, self.max_grid, self.splits))
            object.__setattr__(self, "_hash", h)
        return h

    @property
    def item_kv_tokens(self) -> list[int]:
        """Every work item's KV tokens, in plan order, read once per plan (the model sums, maxes and lays them out
        several times per launch; a serving trace's plans hold 10^3-10^4 items each). Do not modify the list."""
        toks: list[int] | None = self.__dict__.get("_kv_tokens")
        if toks is None:
            toks = list(map(_KV_TOKENS, self.work_items))
            object.__setattr__(self, "_kv_tokens", toks)
        return toks

    @property
    def num_ctas(self) -> int:
        """CTAs launched (grid.x * grid.y * grid.z), padding CTAs included."""
        x, y, z = self.grid
        return x * y * z

    @property
    def long_request_split(self) -> bool:
        """True when some request's KV was actually cut into more than one chunk."""
        return any(s > 1 for s in self.splits)


# new_work_item(request, kv_head, chunk_index, kv_start, kv_tokens, qo_head=None, qo_tile=0, cta=0, worker=None)
new_work_item = WorkItem
_item_of_fields = partial(tuple.__new__, WorkItem)
_KV_TOKENS = itemgetter(WorkItem._fields.index("kv_tokens"))


ItemFields = tuple[int, int | None, int, int, int, int | None, int, int, int | None]


def work_items(rows: Iterable[ItemFields]) -> list[WorkItem]:
    """WorkItems of tuples holding all nine fields in order (no defaults), made at C speed."""
    return list(map(_item_of_fields, rows))


def chunk_items(
    kv_len: int, chunk_tokens: int, request: int, kv_head: int | None, first_cta: int, stride: int = 1
) -> list[WorkItem]:
    """Work items for one request cut into chunks of `chunk_tokens` (an empty request still gets one item).

    CTA indices start at `first_cta` and advance by `stride`.
    """
    if kv_len <= chunk_tokens:  # one chunk (an empty request too)
        return work_items([(request, kv_head, 0, 0, max(kv_len, 0), None, 0, first_cta, None)])
    return work_items([
        (request, kv_head, i, i * chunk_tokens, max(min(chunk_tokens, kv_len - i * chunk_tokens), 0), None, 0,
         first_cta + i * stride, None)
        for i in range(ceil_div(kv_len, chunk_tokens))
    ])
