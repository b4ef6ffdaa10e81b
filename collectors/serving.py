"""Continuous-batching replay: the schedule of `schedule.py` run step by step on the GPU, as a server would.

Each step builds the page table and re-plans the wrapper (the host work a server does per step; it shows as the
gap before the step), then launches attention inside one range 'decode <path tokens> step=S bs=B', then
synchronizes (a server waits for the sampled tokens). Eager mode plans and runs one wrapper per path.
CUDA-graph mode follows SGLang: one CUDA-graph wrapper with preallocated buffers per captured batch size,
captured before the measured region; each step pads the batch up to the next captured size (padding requests
hold 1 token on page 0), re-plans that wrapper and replays its graph; the range then also carries 'live=L',
the real requests.
"""

from __future__ import annotations

from typing import Any

from .annotate import Annotator
from .config import PATHS, RunConfig, range_name, serving_key
from .flashinfer_decode import DecodeBench, paged_batch, read_plan
from .profile import Session
from .runtime import Runtime
from .schedule import Step, assign_pages, capture_sizes, graph_size, make_requests, schedule
from .sidecar import StepRecord
from .sweep import warm_up, warm_up_pages


def _graphs(rt: Runtime, bench: DecodeBench, path: str, sizes: set[int]) -> dict[int, tuple[Any, Any]]:
    """{size: (wrapper, replay)}: a CUDA-graph wrapper per batch size, planned on a placeholder batch and
    captured."""
    out = {}
    for size in sorted(sizes):
        w = bench.wrapper(path, graph_batch=size)
        bench.plan(w, paged_batch(rt, [1] * size, bench.shape.page_size, [[0]] * size))
        out[size] = (w, bench.graph(w, size))
    rt.torch.cuda.synchronize()
    return out


def run_serving(rt: Runtime, cfg: RunConfig, session: Session) -> list[StepRecord]:
    """Replay the schedule once per path inside `session`; return one sidecar step per decode step."""
    if cfg.backend == "fa3":
        from .fa3_decode import run_serving_fa3

        return run_serving_fa3(rt, cfg, session)
    t, sc, page = rt.torch, cfg.serving, cfg.shape.page_size
    requests = make_requests(sc, cfg.steps, cfg.seed)
    steps: list[Step] = schedule(requests, sc, cfg.steps)
    pages, pool = assign_pages(requests, steps, page)
    longs = {r.rid for r in requests if r.long}
    bench = DecodeBench(rt, cfg.shape, max(pool, warm_up_pages(page)), cfg.workspace_mb, cfg.seed)
    warm_up(rt, bench, cfg.paths)
    ladder = capture_sizes(sc)
    graphs = {}
    if cfg.cuda_graph:
        need = {graph_size(st.batch_size, ladder) for st in steps}
        graphs = {p: _graphs(rt, bench, p, need) for p in cfg.paths}
    eager = {p: bench.wrapper(p) for p in cfg.paths} if not cfg.cuda_graph else {}
    q = bench.query(max((st.batch_size for st in steps), default=1))
    out = t.empty_like(q)
    ann = Annotator(t)
    records: list[StepRecord] = []
    with session:
        for path in cfg.paths:
            spec = PATHS[path]
            for st in steps:
                live = st.batch_size
                size = graph_size(live, ladder) if cfg.cuda_graph else live
                lens = list(st.kv_lens) + [1] * (size - live)
                own = [pages[r] for r in st.rids] + [[0]] * (size - live)
                key = serving_key(path, st.index, size, live if cfg.cuda_graph else None)
                w, replay = graphs[path][size] if cfg.cuda_graph else (eager[path], None)
                with session.quiet():
                    bench.plan(w, paged_batch(rt, lens, page, own))
                with ann.step(range_name(key)):
                    if replay is not None:
                        replay()
                    else:
                        w.run(q[:size], bench.kv, out=out[:size])
                t.cuda.synchronize()
                backend, plan = read_plan(w, spec)
                records.append(StepRecord(key, lens, spec.sidecar_path, backend, cfg.cuda_graph, plan,
                                          {"live": live, "long_requests": sum(r in longs for r in st.rids)}))
    return records
