"""The seed experiment: decode paths x KV-length distributions x batch sizes at a fixed total token count.

For each case the wrapper is re-planned (eager: one wrapper per path; CUDA graph: one wrapper per batch size,
captured after its plan), the planner's decision is read back, and `steps` annotated decode steps run, each
followed by a device synchronization so that steps do not overlap. Under `--profiler none` every step is also
timed with CUDA events (median per case in NAME.timing.json).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from .annotate import Annotator
from .config import PATHS, RunConfig, case_key, range_name, sweep_key
from .distributions import DISTRIBUTIONS, kv_lens
from .flashinfer_decode import DecodeBench, paged_batch, pages_for, read_plan
from .profile import Session
from .runtime import Runtime
from .sidecar import PlanRecord, StepRecord


@dataclass
class Case:
    """One planned case, ready to run."""

    path: str
    dist: str
    batch_size: int
    kv_lens: list[int]
    backend: str
    plan: PlanRecord
    run: Callable[[], None]

    @property
    def key(self) -> str:
        return case_key(self.path, self.dist, self.batch_size)

    def step_key(self, step: int) -> str:
        return sweep_key(self.path, self.dist, self.batch_size, step)

    def record(self, key: str, cuda_graph: bool) -> StepRecord:
        return StepRecord(key, self.kv_lens, PATHS[self.path].sidecar_path, self.backend, cuda_graph, self.plan,
                          {"dist": self.dist})


def case_list(cfg: RunConfig) -> list[tuple[str, str, int]]:
    """(path, dist, batch size) in run order; batches too small for a distribution are left out."""
    return [(p, d, b) for p in cfg.paths for d in cfg.dists for b in cfg.batch_sizes
            if b >= DISTRIBUTIONS[d].min_batch]


def max_pages(cfg: RunConfig) -> int:
    """Pages the largest case needs: every request rounds up to whole pages."""
    return max(sum(pages_for(n, cfg.shape.page_size) for n in kv_lens(d, b, cfg.total_tokens))
               for _, d, b in case_list(cfg))


WARM_UP_LENS = (1024,) * 8  # the batch warm_up() runs on every path


def warm_up_pages(page_size: int) -> int:
    return sum(pages_for(n, page_size) for n in WARM_UP_LENS)


def new_bench(rt: Runtime, cfg: RunConfig) -> DecodeBench:
    pages = max(max_pages(cfg), warm_up_pages(cfg.shape.page_size))
    return DecodeBench(rt, cfg.shape, pages, cfg.workspace_mb, cfg.seed)


def warm_up(rt: Runtime, bench: DecodeBench, paths: tuple[str, ...]) -> None:
    """Plan and run a small batch on every path once (JIT compilation and module loading stay out of the
    measured region)."""
    for path in paths:
        w = bench.wrapper(path)
        bench.plan(w, paged_batch(rt, WARM_UP_LENS, bench.shape.page_size))
        bench.eager(w, len(WARM_UP_LENS))()
    rt.torch.cuda.synchronize()


def prepare(rt: Runtime, bench: DecodeBench, cfg: RunConfig, path: str, dist: str, batch_size: int,
            wrappers: dict[str, Any], session: Session | None) -> Case:
    """Plan one case and build its runner (a CUDA graph under cfg.cuda_graph); the host work and the graph's
    warm-up are kept out of the profile."""
    lens = kv_lens(dist, batch_size, cfg.total_tokens)
    batch = paged_batch(rt, lens, cfg.shape.page_size)
    with session.quiet(gpu=True) if session is not None else nullcontext():
        if cfg.cuda_graph:
            w = bench.wrapper(path, graph_batch=batch_size)
        else:
            if path not in wrappers:
                wrappers[path] = bench.wrapper(path)
            w = wrappers[path]
        bench.plan(w, batch)
        backend, plan = read_plan(w, PATHS[path])
        run = bench.graph(w, batch_size) if cfg.cuda_graph else bench.eager(w, batch_size)
        rt.torch.cuda.synchronize()
    return Case(path, dist, batch_size, lens, backend, plan, run)


def cases(rt: Runtime, bench: DecodeBench, cfg: RunConfig, session: Session | None) -> Iterator[Case]:
    """Every case of `cfg`, planned in turn."""
    wrappers: dict[str, Any] = {}
    for path, dist, b in case_list(cfg):
        yield prepare(rt, bench, cfg, path, dist, b, wrappers, session)


def case_source(rt: Runtime, cfg: RunConfig, session: Session | None) -> Iterable[Any]:
    """The cases of `cfg`, ready to run (each has key, step_key(), record(), run): FlashInfer's are planned one
    by one as they are iterated (inside the session, quietly), after a warm-up of every path; FA3's
    (collectors/fa3_decode.py) are all planned and run once here, before the session."""
    if cfg.backend == "fa3":
        from .fa3_decode import sweep_cases

        return sweep_cases(rt, cfg)
    bench = new_bench(rt, cfg)
    warm_up(rt, bench, cfg.paths)
    return cases(rt, bench, cfg, session)


Timed = list[tuple[str, StepRecord, list[float]]]  # (case key, the case's first step, step times in ms)


def run_sweep(rt: Runtime, cfg: RunConfig, session: Session) -> tuple[list[StepRecord], Timed]:
    """Run the sweep inside `session`; return the sidecar steps and, under --profiler none, each case's step
    times in milliseconds (CUDA events)."""
    t = rt.torch
    source = case_source(rt, cfg, session)
    ann = Annotator(t)
    timed = cfg.profiler == "none"
    records: list[StepRecord] = []
    times: Timed = []
    with session:
        for case in source:
            samples = []
            for s in range(cfg.steps):
                key = case.step_key(s)
                if timed:
                    start, end = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
                    start.record()
                with ann.step(range_name(key)):
                    case.run()
                if timed:
                    end.record()
                t.cuda.synchronize()
                if timed:
                    samples.append(start.elapsed_time(end))
                records.append(case.record(key, cfg.cuda_graph))
            if timed:
                times.append((case.key, records[-cfg.steps], samples))
    return records, times
