"""The serving replay's schedule, computed ahead of the GPU run: which requests decode at each step.

Pure Python (seeded `random.Random`), so the batch compositions are known before any kernel runs: the CUDA-graph
runner captures exactly the batch sizes it will need, and tests can check the schedule without a GPU.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .config import ServingConfig


@dataclass(frozen=True)
class Request:
    """One request: it arrives at `arrival` (a step index), holds `prompt_len` KV tokens after its prefill and
    decodes `output_len` tokens, one per step. `long` marks a long-context arrival."""

    rid: int
    arrival: int
    prompt_len: int
    output_len: int
    long: bool = False


@dataclass(frozen=True)
class Step:
    """One decode step: the running requests in batch order and each one's KV length (tokens) during it."""

    index: int
    rids: tuple[int, ...]
    kv_lens: tuple[int, ...]

    @property
    def batch_size(self) -> int:
        return len(self.rids)


def _poisson(rng: random.Random, rate: float) -> int:
    """A Poisson draw (Knuth's method; fine for the small rates of one decode step)."""
    if rate <= 0:
        return 0
    limit, k, p = math.exp(-rate), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


def make_requests(cfg: ServingConfig, steps: int, seed: int) -> list[Request]:
    """`cfg.initial` requests at step 0, then Poisson arrivals at every step; every `long_every`-th arrival
    (counting the initial ones) gets a `long_len`-token prompt."""
    rng = random.Random(seed)
    out: list[Request] = []

    def add(step: int) -> None:
        rid = len(out)
        is_long = cfg.long_every > 0 and (rid + 1) % cfg.long_every == 0
        prompt = cfg.long_len if is_long else rng.randint(*cfg.prompt_len)
        out.append(Request(rid, step, prompt, rng.randint(*cfg.output_len), is_long))

    for _ in range(cfg.initial):
        add(0)
    for step in range(steps):
        for _ in range(_poisson(rng, cfg.arrival_rate)):
            add(step)
    return out


def schedule(requests: list[Request], cfg: ServingConfig, steps: int) -> list[Step]:
    """First come, first served continuous batching: at each step admit waiting arrivals while fewer than
    `max_batch` run, append them after the running ones, decode one token each (the KV length during the step
    is prompt + tokens decoded so far + 1), and drop the requests that produced their last token."""
    by_arrival = sorted(requests, key=lambda r: (r.arrival, r.rid))
    waiting_from = 0
    queue: list[Request] = []
    running: list[Request] = []
    done: dict[int, int] = {}  # rid -> tokens decoded so far
    out: list[Step] = []
    for index in range(steps):
        while waiting_from < len(by_arrival) and by_arrival[waiting_from].arrival <= index:
            queue.append(by_arrival[waiting_from])
            waiting_from += 1
        while queue and len(running) < cfg.max_batch:
            req = queue.pop(0)
            running.append(req)
            done[req.rid] = 0
        if running:
            out.append(Step(index, tuple(r.rid for r in running),
                            tuple(r.prompt_len + done[r.rid] + 1 for r in running)))
        for r in running:
            done[r.rid] += 1
        running = [r for r in running if done[r.rid] < r.output_len]
    return out


def capture_sizes(cfg: ServingConfig) -> list[int]:
    """The CUDA-graph batch sizes: the configured ones, or 1, 2, 4, 8 and every multiple of 16 up to and
    including `max_batch` (SGLang captures a similar ladder)."""
    if cfg.capture_sizes:
        sizes = sorted(set(cfg.capture_sizes))
    else:
        sizes = sorted({1, 2, 4, 8, *range(16, cfg.max_batch + 1, 16), cfg.max_batch})
    return [s for s in sizes if s <= cfg.max_batch] or [cfg.max_batch]


def graph_size(batch_size: int, sizes: list[int]) -> int:
    """The smallest captured size that holds `batch_size` requests (the batch is padded up to it)."""
    for s in sizes:
        if s >= batch_size:
            return s
    raise ValueError(f"batch of {batch_size} exceeds the largest captured size {sizes[-1]}")


def assign_pages(requests: list[Request], steps: list[Step], page_size: int) -> tuple[dict[int, list[int]], int]:
    """Give each scheduled request the pages of its whole life (prompt + output) when it is admitted and take
    them back after its last step; freed pages are reused last-in first-out, so page tables fragment as in a
    server. Page 0 is never given out (CUDA-graph padding points at it). Returns (pages by request, pool size)."""
    lengths = {r.rid: r.prompt_len + r.output_len for r in requests}
    last_step: dict[int, int] = {}
    for st in steps:
        for rid in st.rids:
            last_step[rid] = st.index
    free: list[int] = []
    next_page = 1
    pages: dict[int, list[int]] = {}
    for st in steps:
        for rid in st.rids:
            if rid in pages:
                continue
            need = max(1, math.ceil(lengths[rid] / page_size))
            own = [free.pop() for _ in range(min(need, len(free)))]
            fresh = need - len(own)
            own += range(next_page, next_page + fresh)
            next_page += fresh
            pages[rid] = own
        for rid in st.rids:
            if last_step[rid] == st.index:
                free.extend(reversed(pages[rid]))
    return pages, next_page
