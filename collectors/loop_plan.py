"""The decode loop's schedule, computed before any kernel runs: which requests each step holds, how many query
rows and KV tokens each has, and where the injected events (the ground truth) fall.

Pure Python (seeded `random.Random`), so tests check it without a GPU and the CUDA-graph runner captures exactly
the decode batch sizes it will need. Steps are numbered two ways: the *engine* step `index` counts from the first
warm-up step; the *measured* step counts from the first profiled step (`index - warmup`). Events are placed in
measured steps.

A step is one of
- `decode`: every running request decodes one token (query rows 1, KV length = its context + 1);
- `prefill`: a new request's whole prompt runs alone, no decode rows (vLLM V0 style): query rows = KV = prompt;
- `mixed`: the decode batch plus one chunk of an arriving prompt in the same attention call (chunked prefill):
  query rows [1] * B + [chunk], KV lengths + [prefix + chunk].

Events: `host-sleep` / `host-cpu` (a decode step whose host stalls mid-step), `prefill` (a prefill step; the
request decodes from the next step on), `chunked-prefill` (consecutive mixed steps, one per chunk; the request
decodes after its last chunk), `long-join` (a request whose KV of `join_len` tokens appears without a prefill
joins the decode batch and stays), `gemm-burst` (`gemm-burst@STEP:STEPS`: STEPS consecutive decode steps, each
with an extra MLP of GEMMs in every layer; the GPU side sizes it, loop.py).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

from .checks import at_least, one_of
from .config import LOOP_EVENTS, LOOP_SCENARIOS, PREFILL_BACKENDS, SPLIT_KV, LoopConfig

HOST_EVENTS = ("host-sleep", "host-cpu")
GEMM_EVENT = "gemm-burst"  # its `:N` is a count of steps, not tokens

# The events of each scenario, in order; "onset" is a long join of `onset_len` tokens (left out when it is 0).
SCENARIOS: dict[str, tuple[str, ...]] = {
    "default": ("host-sleep", "host-cpu", "prefill", "host-sleep", "host-cpu", "prefill", "chunked-prefill",
                "onset", "long-join"),
    "host": ("host-sleep", "host-cpu", "host-sleep", "host-cpu"),
    "prefill": ("prefill", "chunked-prefill", "prefill", "chunked-prefill"),
    "join": ("onset", "long-join"),
    "none": (),
}
assert set(SCENARIOS) == set(LOOP_SCENARIOS)

_EVENT_RE = re.compile(r"^(?P<kind>[a-z-]+)@(?P<step>\d+)(?::(?P<tokens>\d+))?$")


@dataclass(frozen=True)
class Event:
    """One injected event. `step`: the measured step it starts at; `span`: steps it occupies (chunks of a chunked
    prefill, steps of a gemm burst, else 1); `tokens`: the prompt (prefill, chunked-prefill) or the KV length
    (long-join), None for host stalls and gemm bursts; `role`: "onset" for the first, moderate long join of a
    scenario, else None."""

    kind: str
    step: int
    tokens: int | None = None
    span: int = 1
    role: str | None = None


@dataclass(frozen=True)
class Request:
    """A request of the loop: `prompt` tokens of context when it first appears at engine step `arrival`; `how`
    it arrives: steady (present from step 0), prefill, chunked-prefill or long-join."""

    rid: int
    prompt: int
    arrival: int
    how: str


@dataclass(frozen=True)
class LoopStep:
    """One step: the requests in the attention call (batch order) with their query rows and KV lengths (the new
    tokens included). `event` / `tokens` are the truth (the chunk's tokens for a chunked prefill)."""

    index: int
    measured: int | None
    phase: str  # decode | prefill | mixed
    rids: tuple[int, ...]
    qo_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    event: str | None = None
    tokens: int | None = None

    @property
    def batch_size(self) -> int:
        return len(self.rids)

    @property
    def rows(self) -> int:
        """Query rows of the step: what the GEMMs run on."""
        return sum(self.qo_lens)

    @property
    def sampled_rows(self) -> list[int]:
        """The row of each request that produces a token (its last query row), in batch order."""
        ends, acc = [], 0
        for n in self.qo_lens:
            acc += n
            ends.append(acc - 1)
        return ends


@dataclass(frozen=True)
class LoopPlan:
    """The whole schedule: requests, every step (warm-up ones first), the events, each request's pages."""

    requests: tuple[Request, ...]
    steps: tuple[LoopStep, ...]
    events: tuple[Event, ...]
    warmup: int
    pages: dict[int, range]
    pool_pages: int

    @property
    def measured(self) -> tuple[LoopStep, ...]:
        return self.steps[self.warmup:]

    def decode_sizes(self) -> list[int]:
        """The decode batch sizes of all steps (what a CUDA-graph run captures), ascending."""
        return sorted({s.batch_size for s in self.steps if s.phase == "decode"})

    def slots(self, step: LoopStep, page_size: int) -> tuple[list[int], list[int]]:
        """(page, offset in page) of every KV token the step writes, in row order: each request's last
        qo_len positions."""
        pages, offs = [], []
        for rid, qo, kv in zip(step.rids, step.qo_lens, step.kv_lens, strict=True):
            own = self.pages[rid]
            for pos in range(kv - qo, kv):
                pages.append(own[pos // page_size])
                offs.append(pos % page_size)
        return pages, offs

    def page_lists(self, step: LoopStep, page_size: int) -> list[list[int]]:
        """Each request's pages for its KV length in this step (the attention call's page table)."""
        return [list(self.pages[r][:max(1, math.ceil(n / page_size))]) for r, n in zip(step.rids, step.kv_lens,
                                                                                      strict=True)]


# ---------------------------------------------------------------------------------------------- events
def parse_events(text: str) -> list[tuple[str, int, int | None]]:
    """'host-sleep@22,long-join@100:65536' -> [(kind, measured step, tokens or None)]; ValueError (one line)."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        m = _EVENT_RE.match(item)
        if not m or m["kind"] not in LOOP_EVENTS:
            raise ValueError(f"--events: {item!r} is not KIND@STEP[:TOKENS] with KIND one of {', '.join(LOOP_EVENTS)}")
        tokens = int(m["tokens"]) if m["tokens"] else None
        if tokens is not None and m["kind"] in HOST_EVENTS:
            raise ValueError(f"--events: {item!r}: host stalls take no token count")
        if tokens is not None and tokens < 1:
            what = "the step count" if m["kind"] == GEMM_EVENT else "tokens"
            raise ValueError(f"--events: {item!r}: {what} must be at least 1")
        out.append((m["kind"], int(m["step"]), tokens))
    return out


def _span(kind: str, tokens: int | None, cfg: LoopConfig) -> int:
    if kind == GEMM_EVENT:
        return tokens or cfg.gemm_steps
    return math.ceil((tokens or cfg.chunk_prompt) / cfg.chunk) if kind == "chunked-prefill" else 1


def place_events(cfg: LoopConfig, steps: int, rng: random.Random) -> list[Event]:
    """The events of `cfg` (its explicit list, else its scenario's, spaced `spacing` steps apart from `first`)
    in measured steps; prefill prompts are drawn in `prefill_len`. ValueError when they overlap or do not fit."""
    if cfg.events.strip():
        wanted = parse_events(cfg.events)
        wanted.sort(key=lambda e: e[1])
    else:
        wanted, at = [], cfg.first
        for kind in SCENARIOS[cfg.scenario]:
            if kind == "onset" and not cfg.onset_len:
                continue
            wanted.append((kind, at, None))
            at += max(cfg.spacing, _span(kind, None, cfg))
    events: list[Event] = []
    for kind, step, tokens in wanted:
        role = None
        if kind == "onset":
            kind, tokens, role = "long-join", cfg.onset_len, "onset"
        elif kind == "long-join" and tokens is None:
            tokens = cfg.join_len
        elif kind == "prefill" and tokens is None:
            tokens = rng.randint(*cfg.prefill_len)
        elif kind == "chunked-prefill" and tokens is None:
            tokens = cfg.chunk_prompt
        span = _span(kind, tokens, cfg)
        if kind == GEMM_EVENT:
            tokens = None  # its count was the span
        events.append(Event(kind, step, tokens, span, role))
    end = -1
    for ev in events:
        if ev.step <= end:
            raise ValueError(f"events overlap: {ev.kind} at measured step {ev.step} starts before step {end} ends")
        end = ev.step + ev.span - 1
    if end >= steps:
        where = ", ".join(f"{e.kind}@{e.step}" for e in events)
        raise ValueError(f"--steps {steps} is too few for the events ({where}): they need at least {end + 1} "
                         f"measured steps")
    return events


# ---------------------------------------------------------------------------------------------- the schedule
def check(cfg: LoopConfig) -> None:
    """Raise ValueError (one line, naming the option) for a loop configuration that cannot run."""
    for option, value, minimum in (("--batch", cfg.batch, 1), ("--layers", cfg.layers, 1),
                                   ("--vocab", cfg.vocab, 2), ("--intermediate", cfg.intermediate, 0),
                                   ("--first-event", cfg.first, 0), ("--spacing", cfg.spacing, 1),
                                   ("--chunk", cfg.chunk, 1), ("--chunk-prompt", cfg.chunk_prompt, 1),
                                   ("--long-len", cfg.join_len, 1), ("--onset-len", cfg.onset_len, 0),
                                   ("--gemm-steps", cfg.gemm_steps, 1)):
        at_least(value, minimum, option)
    for option, amount in (("--stall-factor", cfg.stall_factor), ("--sleep-ms", cfg.sleep_ms),
                           ("--cpu-ms", cfg.cpu_ms)):
        if not amount >= 0 or not math.isfinite(amount):
            raise ValueError(f"{option} must be a finite number >= 0, got {amount}")
    if not (math.isfinite(cfg.gemm_factor) and cfg.gemm_factor > 1):
        raise ValueError(f"--gemm-factor must be a finite number above 1, got {cfg.gemm_factor}")
    one_of(cfg.split_kv, SPLIT_KV, "--split-kv")
    one_of(cfg.prefill_backend, PREFILL_BACKENDS, "--prefill-backend")
    if cfg.stall_factor == 0 and (cfg.sleep_ms == 0 or cfg.cpu_ms == 0):
        raise ValueError("--stall-factor 0 needs --sleep-ms and --cpu-ms")
    for option, (lo, hi) in (("--prompt-len", cfg.prompt_len), ("--prefill-len", cfg.prefill_len)):
        if lo < 1 or lo > hi:
            raise ValueError(f"{option} must be LOW:HIGH with 1 <= LOW <= HIGH, got {lo}:{hi}")
    one_of(cfg.scenario, SCENARIOS, "--scenario")


def plan_loop(cfg: LoopConfig, steps: int, warmup: int, seed: int, page_size: int) -> LoopPlan:
    """The schedule of `warmup` + `steps` engine steps. Deterministic in `seed`; ValueError (one line) when the
    configuration or the events do not fit."""
    check(cfg)
    if steps < 1 or warmup < 0:
        raise ValueError(f"need at least one measured step and no negative warm-up (got {steps}, {warmup})")
    rng = random.Random(seed)
    requests = [Request(rid, rng.randint(*cfg.prompt_len), 0, "steady") for rid in range(cfg.batch)]
    events = place_events(cfg, steps, rng)
    ctx = {r.rid: r.prompt for r in requests}  # KV tokens held before the step
    running = [r.rid for r in requests]
    by_step = {warmup + e.step: e for e in events}
    bursting = {warmup + e.step + i for e in events if e.kind == GEMM_EVENT for i in range(e.span)}
    out: list[LoopStep] = []
    chunking: tuple[int, int, int] | None = None  # (rid, prompt, chunks left)
    for index in range(warmup + steps):
        measured = index - warmup if index >= warmup else None
        ev = by_step.get(index)
        kind = ev.kind if ev else None
        if ev and ev.kind == "prefill":
            assert ev.tokens is not None
            rid = len(requests)
            requests.append(Request(rid, ev.tokens, index, "prefill"))
            out.append(LoopStep(index, measured, "prefill", (rid,), (ev.tokens,), (ev.tokens,), kind, ev.tokens))
            ctx[rid] = ev.tokens
            running.append(rid)  # it decodes from the next step on
            continue
        if ev and ev.kind == "chunked-prefill":
            assert ev.tokens is not None
            rid = len(requests)
            requests.append(Request(rid, ev.tokens, index, "chunked-prefill"))
            ctx[rid] = 0
            chunking = (rid, ev.tokens, ev.span)
        if ev and ev.kind == "long-join":
            assert ev.tokens is not None
            rid = len(requests)
            requests.append(Request(rid, ev.tokens - 1, index, "long-join"))
            ctx[rid] = ev.tokens - 1  # its KV during the join step is exactly `tokens`
            running.append(rid)
        rids = list(running)
        qo = [1] * len(rids)
        kv = [ctx[r] + 1 for r in rids]
        for r in rids:
            ctx[r] += 1
        phase, tokens = "decode", (ev.tokens if ev else None)
        if index in bursting:
            kind = GEMM_EVENT
        if chunking is not None:
            rid, prompt, left = chunking
            n = min(cfg.chunk, prompt - ctx[rid])
            rids.append(rid)
            qo.append(n)
            kv.append(ctx[rid] + n)
            phase, kind, tokens = "mixed", "chunked-prefill", n
            ctx[rid] += n
            chunking = (rid, prompt, left - 1) if left > 1 else None
            if chunking is None:
                running.append(rid)  # decodes from the next step on
        out.append(LoopStep(index, measured, phase, tuple(rids), tuple(qo), tuple(kv), kind, tokens))
    pages, pool = assign_pages(requests, out, page_size)
    return LoopPlan(tuple(requests), tuple(out), tuple(events), warmup, pages, pool)


def assign_pages(requests: list[Request], steps: list[LoopStep], page_size: int) -> tuple[dict[int, range], int]:
    """Consecutive pages per request, sized for the longest KV it reaches, in request order from page 1 (page 0
    stays free: CUDA-graph placeholders and warm-ups point at it). Returns (pages by request, pool size)."""
    longest = {r.rid: 1 for r in requests}
    for st in steps:
        for rid, n in zip(st.rids, st.kv_lens, strict=True):
            longest[rid] = max(longest[rid], n)
    pages, nxt = {}, 1
    for r in requests:
        need = max(1, math.ceil(longest[r.rid] / page_size))
        pages[r.rid] = range(nxt, nxt + need)
        nxt += need
    return pages, nxt


# ---------------------------------------------------------------------------------------------- step names
def torch_key(measured: int, lead: int) -> str:
    """A torch.profiler run's key: the ProfilerStep#N range of measured step `measured`, N = lead + measured
    (the profiler's wait + warm-up steps come first)."""
    return f"ProfilerStep#{lead + measured}"


def nvtx_key(index: int) -> str:
    """An NVTX run's key, `id=N` (N the engine step); its range is named `step id=N`."""
    return f"id={index}"


def nvtx_name(index: int) -> str:
    return f"step {nvtx_key(index)}"
