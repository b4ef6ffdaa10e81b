"""A model-like LLM decode loop on the GPU with injected, known events: the ground truth for "why was this step
slow". The schedule (batches and events) comes from loop_plan.py; this module runs it.

A step, as a serving engine's eager step (vLLM / SGLang): host preparation (page table, slot mapping and token
ids copied to the GPU, the attention wrapper's `plan()`), then an L-layer transformer stack (per layer: RMSNorm,
QKV GEMM, the new K/V rows written into that layer's paged KV cache by indexing, FlashInfer attention, O GEMM,
residual, RMSNorm, gate_up GEMM, SiLU x mul, down GEMM, residual), the final norm, the LM-head GEMM, argmax and
`.tolist()` of the sampled ids (the host waits for its tokens). Decode steps attend with the path's decode
wrapper; prefill and mixed (chunked-prefill) steps with BatchPrefillWithPagedKVCacheWrapper (FA2, causal).

A `gemm-burst` step adds, in every layer after the MLP, an extra pair of GEMMs (hidden -> X -> hidden, one weight
pair shared by the layers, X sized on the warm-up steps so that the step takes about `gemm_factor` x the median
warm-up step): a step whose GEMM component alone grew. `--split-kv off` plans the FA2 tensor-core decode wrapper
with `disable_split_kv=True`; `--prefill-backend fa3` runs prefill and mixed steps on FlashInfer's SM90 kernels.

Host stalls (`host-sleep`: time.sleep; `host-cpu`: float32 CPU matrix products until the stall's time is spent,
aten::mm in Kineto) happen after layer L // 2 in eager mode, between plan() and the graph replay in CUDA-graph mode.
Before the measured region the stack runs once for every query-row count the schedule holds (cuBLAS chooses its
GEMM kernels on a shape's first use, some 10 ms of host time, which is no event of the loop). With `--cuda-graph` every
decode step replays a CUDA graph of the whole stack captured (before the measured region) for its exact batch
size, from static token-id and slot buffers and a CUDA-graph decode wrapper re-planned before each replay; prefill
and mixed steps run eager, as engines do.

Step ranges: under torch.profiler the profiler's own ProfilerStep#N ranges (prof.step() at each step boundary,
a wait and a warm-up step first: N = 2 + measured step); otherwise one NVTX range `step id=N` per measured step
(N = the engine step, warm-up steps included).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from typing import Any

from .annotate import Annotator
from .config import PATHS, RunConfig
from .flashinfer_decode import DecodeBench, PagedBatch, paged_batch, read_plan
from .loop_plan import (
    GEMM_EVENT,
    HOST_EVENTS,
    LoopPlan,
    LoopStep,
    nvtx_key,
    nvtx_name,
    plan_loop,
    torch_key,
)
from .profile import Session
from .runtime import Runtime
from .sidecar import StepRecord

EPS = 1e-5
CPU_MM = 512  # host-cpu stalls multiply CPU float32 matrices of CPU_MM x CPU_MM (about 1 ms each on 16 cores)
# prefill / mixed steps: BatchPrefillWithPagedKVCacheWrapper, backend="fa2" (FA2) or "fa3" (SM90)
PREFILL_SPECS = {"fa2": PATHS["tc-fa2"], "fa3": PATHS["tc-auto"]}
BURST_PROBE = 8192  # the extra MLP's width while its time is measured
BURST_MAX_BYTES = 8 << 30  # the extra MLP's weights stay under 8 GiB

Attend = Callable[[Any, Any], Any]


class Stack:
    """Random weights of an L-layer decoder (bf16, scaled by 1/sqrt(fan-in)) and one paged KV cache per layer
    (random values; all layers share the page table, as in engines)."""

    def __init__(self, rt: Runtime, bench: DecodeBench, cfg: RunConfig) -> None:
        t = rt.torch
        self.t, self.F = t, t.nn.functional
        s, lc = cfg.shape, cfg.loop
        dev, dt = bench.device, bench.q_dtype
        self.hq, self.hkv, self.d = s.qo_heads, s.kv_heads, s.head_dim
        self.hidden = s.qo_heads * s.head_dim
        self.inter = lc.mlp_width(self.hidden)
        self.qd, self.kd = self.hq * self.d, self.hkv * self.d
        gen = t.Generator(device=dev).manual_seed(cfg.seed + 1)

        def randn(*shape: int) -> Any:
            return t.randn(shape, device=dev, dtype=dt, generator=gen)

        def weight(rows: int, cols: int) -> Any:
            return randn(rows, cols).mul_(cols ** -0.5)

        ones = t.ones(self.hidden, device=dev, dtype=dt)
        self.emb = randn(lc.vocab, self.hidden)
        self.layers = [{"ln1": ones, "qkv": weight(self.qd + 2 * self.kd, self.hidden),
                        "o": weight(self.hidden, self.qd), "ln2": ones,
                        "gate_up": weight(2 * self.inter, self.hidden), "down": weight(self.hidden, self.inter)}
                       for _ in range(lc.layers)]
        self.norm, self.lm = ones, weight(lc.vocab, self.hidden)
        self.kv = [bench.kv] + [t.randn(tuple(bench.kv.shape), dtype=bench.kv.dtype, device=dev, generator=gen)
                                for _ in range(lc.layers - 1)]
        self.randn, self.weight = randn, weight
        self.burst: tuple[Any, Any] | None = None  # the gemm-burst MLP (up [X, hidden], down [hidden, X])
        self.k_cache = [c[:, 0] for c in self.kv]  # [pages, page_size, H_kv, D] views (NHD)
        self.v_cache = [c[:, 1] for c in self.kv]

    def set_burst(self, width: int) -> None:
        """The extra MLP of gemm-burst steps, `width` wide (random weights; one pair for every layer)."""
        self.burst = None
        self.t.cuda.empty_cache()
        self.burst = (self.weight(width, self.hidden), self.weight(self.hidden, width))

    def extra(self, h: Any) -> Any:
        assert self.burst is not None
        up, down = self.burst
        return self.F.linear(self.F.linear(h, up), down)

    def layer(self, i: int, x: Any, attend: Attend, pg: Any, off: Any, burst: bool = False) -> Any:
        F, p, n = self.F, self.layers[i], x.shape[0]
        h = F.rms_norm(x, (self.hidden,), p["ln1"], EPS)
        qkv = F.linear(h, p["qkv"])
        q = qkv[:, :self.qd].contiguous().view(n, self.hq, self.d)
        k = qkv[:, self.qd:self.qd + self.kd].view(n, self.hkv, self.d)
        v = qkv[:, self.qd + self.kd:].view(n, self.hkv, self.d)
        self.k_cache[i][pg, off] = k  # the new tokens' K/V into their slots (page, offset)
        self.v_cache[i][pg, off] = v
        o = attend(q, self.kv[i])
        x = x + F.linear(o.view(n, self.qd), p["o"])
        h = F.rms_norm(x, (self.hidden,), p["ln2"], EPS)
        gu = F.linear(h, p["gate_up"])
        x = x + F.linear(F.silu(gu[:, :self.inter]) * gu[:, self.inter:], p["down"])
        return x + self.extra(h) if burst else x

    def forward(self, ids: Any, pg: Any, off: Any, attend: Attend, rows: Any = None,
                stall: Callable[[], None] | None = None, burst: bool = False) -> Any:
        """Token ids -> sampled ids (argmax over the LM head) of `rows` (None: every row). `stall` runs on the
        host before layer L // 2; `burst`: every layer runs the extra MLP too."""
        F = self.F
        x = F.embedding(ids, self.emb)
        for i in range(len(self.layers)):
            if stall is not None and i == len(self.layers) // 2:
                stall()
            x = self.layer(i, x, attend, pg, off, burst)
        x = F.rms_norm(x, (self.hidden,), self.norm, EPS)
        if rows is not None:
            x = x[rows]
        return F.linear(x, self.lm).argmax(dim=-1)


class Graph:
    """One decode batch size's CUDA graph of the whole stack: a CUDA-graph decode wrapper with preallocated
    buffers, static token-id and slot inputs, the sampled ids as its static output."""

    def __init__(self, rt: Runtime, bench: DecodeBench, stack: Stack, path: str, size: int,
                 split_off: bool = False) -> None:
        t = rt.torch
        self.t, self.size = t, size
        self.wrapper = bench.wrapper(path, graph_batch=size)
        bench.plan(self.wrapper, paged_batch(rt, [1] * size, bench.shape.page_size, [[0]] * size),
                   split_off)
        dev = bench.device
        self.ids, self.pg, self.off = (t.zeros(size, dtype=t.int64, device=dev) for _ in range(3))
        wrapper = self.wrapper

        def run() -> Any:
            return stack.forward(self.ids, self.pg, self.off, wrapper.run)

        side = t.cuda.Stream()
        side.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(side):
            run()
        t.cuda.current_stream().wait_stream(side)
        t.cuda.synchronize()
        self.graph = t.cuda.CUDAGraph()
        with t.cuda.graph(self.graph):
            self.out = run()

    def load(self, ids: Any, pg: Any, off: Any) -> None:
        """Copy the step's host inputs into the static buffers (H2D)."""
        self.ids.copy_(ids, non_blocking=True)
        self.pg.copy_(pg, non_blocking=True)
        self.off.copy_(off, non_blocking=True)


class Loop:
    """The decode loop of one run: plan, weights, wrappers, optional CUDA graphs; `run()` executes it."""

    def __init__(self, rt: Runtime, cfg: RunConfig, session: Session) -> None:
        t = rt.torch
        self.rt, self.t, self.cfg, self.session = rt, t, cfg, session
        self.lc, self.page = cfg.loop, cfg.shape.page_size
        self.path = cfg.paths[0]
        self.spec = PATHS[self.path]
        self.prefill_spec = PREFILL_SPECS[self.lc.prefill_backend]
        self.split_off = self.lc.split_kv == "off"  # the CLI allows it on tc-fa2 only
        self.plan: LoopPlan = plan_loop(self.lc, cfg.steps, cfg.warmup, cfg.seed, self.page)
        self.bench = DecodeBench(rt, cfg.shape, self.plan.pool_pages, cfg.workspace_mb, cfg.seed)
        self.stack = Stack(rt, self.bench, cfg)
        self.decode_w = None if cfg.cuda_graph else self.bench.wrapper(self.path)
        assert rt.flashinfer is not None  # require_gpu() imported it (the loop runs FlashInfer)
        self.prefill_w = rt.flashinfer.BatchPrefillWithPagedKVCacheWrapper(self.bench.workspace, "NHD",
                                                                            backend=self.lc.prefill_backend)
        self.host_gen = t.Generator().manual_seed(cfg.seed + 2)
        self.last: dict[int, int] = {}  # each request's last sampled token
        self.graphs: dict[int, Graph] = {}
        self.ann = Annotator(t) if cfg.profiler == "nsys" else None
        self.sleep_ms = self.cpu_ms = self.mm_ms = 0.0
        self.mm_done: dict[int, int] = {}  # engine step -> CPU matrix products of its host-cpu stall
        self._mm = (t.randn(CPU_MM, CPU_MM), t.randn(CPU_MM, CPU_MM))
        self.burst_info: dict[str, Any] = {}

    # ------------------------------------------------------------------------------------------ host side
    def _batch(self, st: LoopStep) -> PagedBatch:
        return paged_batch(self.rt, st.kv_lens, self.page, self.plan.page_lists(st, self.page))

    def _inputs(self, st: LoopStep) -> tuple[Any, Any, Any]:
        """Host tensors of the step: token ids of every query row (decode rows: the request's last sampled
        token; prompt rows: random ids), and the slot (page, offset) of every new KV token."""
        t = self.t
        ids: list[int] = []
        for rid, qo in zip(st.rids, st.qo_lens, strict=True):
            if qo == 1 and rid in self.last:
                ids.append(self.last[rid])
            else:
                ids.extend(t.randint(self.lc.vocab, (qo,), generator=self.host_gen).tolist())
        pg, off = self.plan.slots(st, self.page)
        return (t.tensor(ids, dtype=t.int64), t.tensor(pg, dtype=t.int64), t.tensor(off, dtype=t.int64))

    def _stall(self, st: LoopStep, spent: list[float]) -> Callable[[], None]:
        def stall() -> None:
            t0 = time.perf_counter()
            if st.event == "host-sleep":
                time.sleep(self.sleep_ms / 1e3)
            else:  # matrix products until cpu_ms is spent (one product's time varies several-fold on a VM)
                a, b = self._mm
                n = 0
                while n == 0 or (time.perf_counter() - t0) * 1e3 < self.cpu_ms:
                    self.t.mm(a, b)
                    n += 1
                self.mm_done[st.index] = n
            spent.append((time.perf_counter() - t0) * 1e3)

        return stall

    def calibrate(self, step_ms: list[float]) -> dict[str, Any]:
        """Host stall lengths: the options, or stall_factor x the median warm-up step (and, for the record, one
        CPU matrix product's time)."""
        t = self.t
        normal = statistics.median(step_ms[1:] or step_ms)
        self.sleep_ms = self.lc.sleep_ms or self.lc.stall_factor * normal
        self.cpu_ms = self.lc.cpu_ms or self.lc.stall_factor * normal
        a, b = self._mm
        for _ in range(3):
            t.mm(a, b)
        t0, reps = time.perf_counter(), 8
        for _ in range(reps):
            t.mm(a, b)
        self.mm_ms = (time.perf_counter() - t0) * 1e3 / reps
        return {"warmup_step_median_ms": round(normal, 3), "warmup_step_ms": [round(x, 3) for x in step_ms],
                "sleep_ms": round(self.sleep_ms, 3), "cpu_ms": round(self.cpu_ms, 3),
                "cpu_mm": f"torch.mm({CPU_MM}x{CPU_MM} float32, CPU) repeated until cpu_ms is spent",
                "cpu_mm_ms_each": round(self.mm_ms, 4), "cpu_threads": t.get_num_threads()}

    def _extra_ms(self, rows: int) -> float:
        """One layer's extra MLP on `rows` rows, ms: CUDA events, median of 5 after 3 warm-up calls (the warm-up
        also has cuBLAS choose its kernels for this shape before the measured region)."""
        t, stack = self.t, self.stack
        h = stack.randn(rows, stack.hidden)
        for _ in range(3):
            stack.extra(h)
        times = []
        for _ in range(5):
            a, b = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            a.record()
            stack.extra(h)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        return float(statistics.median(times))

    def _walls(self, st: LoopStep, n: int) -> float:
        """Median wall time (ms) of `n` re-runs of the (warm-up) step `st`, as the loop times a step."""
        walls = []
        for _ in range(n):
            t0 = time.perf_counter()
            self.step(st)
            walls.append((time.perf_counter() - t0) * 1e3)
        return float(statistics.median(walls))

    @contextmanager
    def _like_measured(self) -> Iterator[None]:
        """The host overhead of the measured region: under torch.profiler a throwaway profiling session of the
        same kind (CPU + CUDA activities, shapes recorded; never exported), else nothing (NVTX costs ~nothing)."""
        if self.cfg.profiler != "torch":
            yield
            return
        act = self.t.profiler.ProfilerActivity
        with self.t.profiler.profile(activities=[act.CPU, act.CUDA], record_shapes=True):
            yield

    def size_burst(self, last: LoopStep) -> None:
        """Size the gemm-burst MLP so that a burst step takes about `gemm_factor` x a plain step, wall time.

        Open loop first: a probe width is timed with CUDA events and scaled linearly (the GEMMs are
        weight-bandwidth bound at decode row counts) to (gemm_factor - 1) x the step. Eager steps are host-bound
        (the GPU idles while Python enqueues), so part of that extra GPU work hides in the idle time: the last
        warm-up step `last` is then re-run plain and with the burst (under a throwaway torch.profiler session when
        the run is profiled by torch: its host overhead lengthens every step and so widens the idle time), and the
        width grows by the wall time still missing (beyond the idle time, the wall grows one for one with GPU
        work). `burst_info` keeps the width,
        the targets, every probe and the measured extra GPU time per row count; all of it happens before the
        measured region."""
        rows = sorted({s.rows for s in self.plan.steps if s.event == GEMM_EVENT})
        if not rows:
            return
        layers, hidden = self.lc.layers, self.stack.hidden
        cap = max(256, (BURST_MAX_BYTES // (4 * hidden)) // 256 * 256)  # two bf16 matrices of width x hidden
        plain = self._walls(last, 3)
        target = (self.lc.gemm_factor - 1) * plain
        width, probes, closed = BURST_PROBE, [], []
        ms = 0.0
        for _ in range(2):
            self.stack.set_burst(width)
            ms = layers * self._extra_ms(max(rows))
            probes.append({"width": width, "extra_gpu_ms": round(ms, 4)})
            width = min(cap, max(256, round(width * target / ms / 256) * 256))
        burst_step = replace(last, event=GEMM_EVENT)
        for _ in range(2):
            self.stack.set_burst(width)
            self._extra_ms(last.rows)  # cuBLAS picks its kernels for this width outside the timed steps
            with self._like_measured():
                plain, burst = self._walls(last, 3), self._walls(burst_step, 3)
            closed.append({"width": width, "plain_wall_ms": round(plain, 3), "burst_wall_ms": round(burst, 3),
                           "ratio": round(burst / plain, 3)})
            missing = self.lc.gemm_factor * plain - burst
            ms = layers * self._extra_ms(last.rows)
            width = min(cap, max(256, round(width * (ms + missing) / ms / 256) * 256))
        self.stack.set_burst(width)
        self.burst_info = {
            "width": width, "gemm_factor": self.lc.gemm_factor, "target_extra_wall_ms": round(target, 3),
            "open_loop": probes, "closed_loop": closed,
            "extra_ms_by_rows": {r: round(layers * self._extra_ms(r), 3) for r in rows},
            "how": f"each layer: x += linear(linear(h, up[{width}, {hidden}]), down[{hidden}, {width}]) after its "
                   "MLP (h: the MLP's normed input); extra GPU ms by CUDA events, walls of re-runs of the last "
                   "warm-up step, all before the measured region"}

    # ------------------------------------------------------------------------------------------ one step
    def step(self, st: LoopStep) -> tuple[str, Any, float | None]:
        """Run one step (host preparation included); return (backend, plan record, host stall ms or None)."""
        t, bench = self.t, self.bench
        dev = bench.device
        batch = self._batch(st)
        ids, pg, off = self._inputs(st)
        spent: list[float] = []
        stall = self._stall(st, spent) if st.event in HOST_EVENTS else None
        if st.phase == "decode" and self.cfg.cuda_graph:
            g = self.graphs[st.batch_size]
            bench.plan(g.wrapper, batch, self.split_off)
            g.load(ids, pg, off)
            if stall is not None:
                stall()
            g.graph.replay()
            sampled = g.out.tolist()
            wrapper, spec = g.wrapper, self.spec
        else:
            ids_d, pg_d, off_d = (x.to(dev, non_blocking=True) for x in (ids, pg, off))
            rows = None
            if st.phase == "decode":
                wrapper, spec = self.decode_w, self.spec
                bench.plan(wrapper, batch, self.split_off)
            else:
                wrapper, spec = self.prefill_w, self.prefill_spec
                self._plan_prefill(st, batch)
                rows = t.tensor(st.sampled_rows, dtype=t.int64).to(dev, non_blocking=True)
            sampled = self.stack.forward(ids_d, pg_d, off_d, wrapper.run, rows, stall,
                                         st.event == GEMM_EVENT).tolist()
        for rid, tok in zip(st.rids, sampled, strict=True):
            self.last[rid] = int(tok)
        backend, plan = read_plan(wrapper, spec)
        return backend, plan, (spent[0] if spent else None)

    def _plan_prefill(self, st: LoopStep, batch: PagedBatch) -> None:
        t, s = self.t, self.cfg.shape
        qo = [0]
        for n in st.qo_lens:
            qo.append(qo[-1] + n)
        self.prefill_w.plan(t.tensor(qo, dtype=t.int32), batch.indptr, batch.indices, batch.last_page_len,
                            s.qo_heads, s.kv_heads, s.head_dim, s.page_size, causal=True,
                            q_data_type=self.bench.q_dtype, kv_data_type=self.bench.kv_dtype)

    # ------------------------------------------------------------------------------------------ the run
    def warm_shapes(self) -> None:
        """Run the stack once per query-row shape of the schedule, on placeholders (every token on page 0): each
        prefill / mixed step's (rows, requests) through the prefill wrapper and, in eager mode, each decode batch
        size through the decode wrapper (CUDA-graph captures warm those). Module loading and cuBLAS's first-use
        kernel choice stay out of the measurement."""
        t, dev = self.t, self.bench.device
        shapes = {(s.phase != "decode", s.rows, s.batch_size) for s in self.plan.steps
                  if s.phase != "decode" or not self.cfg.cuda_graph}
        for prefill, rows, reqs in sorted(shapes):
            qo = (1,) * (reqs - 1) + (rows - reqs + 1,)
            st = LoopStep(-1, None, "mixed" if prefill else "decode", tuple(range(-reqs, 0)), qo, qo)
            batch = paged_batch(self.rt, qo, self.page, [[0] * -(-n // self.page) for n in qo])
            if prefill:
                self._plan_prefill(st, batch)
                w, out_rows = self.prefill_w, t.tensor(st.sampled_rows, dtype=t.int64, device=dev)
            else:
                w, out_rows = self.decode_w, None
                self.bench.plan(w, batch, self.split_off)
            pg = t.zeros(rows, dtype=t.int64, device=dev)
            off = t.arange(rows, dtype=t.int64, device=dev) % self.page
            ids = t.zeros(rows, dtype=t.int64, device=dev)
            self.stack.forward(ids, pg, off, w.run, out_rows).tolist()

    def run(self) -> tuple[list[StepRecord], dict[str, Any]]:
        t, cfg, plan, session = self.t, self.cfg, self.plan, self.session
        self.warm_shapes()
        if cfg.cuda_graph:
            for size in plan.decode_sizes():
                self.graphs[size] = Graph(self.rt, self.bench, self.stack, self.path, size, self.split_off)
        t.cuda.synchronize()
        lead = session.lead_steps
        enter_at = cfg.warmup - lead
        warm_ms: list[float] = []
        records: list[StepRecord] = []
        stalls: dict[int, float] = {}
        calibration: dict[str, Any] = {}
        for st in plan.steps:
            if st.index == enter_at:
                calibration = self.calibrate(warm_ms)
                self.size_burst(plan.steps[st.index - 1])
                session.__enter__()
            elif st.index > enter_at:
                session.step()
            name = None if st.measured is None else nvtx_name(st.index)
            t0 = time.perf_counter()
            if self.ann is not None and name is not None:
                self.ann.push(name)
            backend, pr, stalled = self.step(st)
            if self.ann is not None and name is not None:
                self.ann.pop()
            wall = (time.perf_counter() - t0) * 1e3
            if st.measured is None:
                warm_ms.append(wall)
                continue
            if stalled is not None:
                stalls[st.measured] = stalled
            key = torch_key(st.measured, lead) if session.stepped else nvtx_key(st.index)
            graph = cfg.cuda_graph and st.phase == "decode"
            path = self.spec.sidecar_path if st.phase == "decode" else self.prefill_spec.sidecar_path
            truth = {"event": st.event, "ms": None if stalled is None else round(stalled, 3),
                     "tokens": st.tokens, "layers": self.lc.layers}
            if st.event == GEMM_EVENT:
                truth.update(component="gemm", extra_gemm_ms=self.burst_info.get("extra_ms_by_rows", {}).get(
                    st.rows), extra_width=self.burst_info.get("width"))
            records.append(StepRecord(key, list(st.kv_lens), path, backend, graph, pr,
                                      {"qo_lens": list(st.qo_lens), "truth": truth, "phase": st.phase,
                                       "step": st.measured, "engine_step": st.index, "wall_ms": round(wall, 3)}))
        session.step()  # ends the last ProfilerStep range (and, under torch.profiler, exports the trace)
        session.__exit__(None, None, None)
        return records, self._run_extra(records, stalls, calibration)

    def _run_extra(self, records: list[StepRecord], stalls: dict[int, float],
                   calibration: dict[str, Any]) -> dict[str, Any]:
        plan, lc = self.plan, self.lc
        keys = {r.extra["step"]: r.key for r in records}
        events = []
        for ev in plan.events:
            row: dict[str, Any] = {"event": ev.kind, "step": ev.step, "span": ev.span,
                                   "keys": [keys[s] for s in range(ev.step, ev.step + ev.span)],
                                   "tokens": ev.tokens, "role": ev.role}
            if ev.kind in HOST_EVENTS:
                row["ms"] = round(stalls[ev.step], 3)
            if ev.kind == "host-cpu":
                row["cpu_mm"] = self.mm_done[self.cfg.warmup + ev.step]
            if ev.kind == GEMM_EVENT:
                row.update(component="gemm", **{k: v for k, v in self.burst_info.items() if k != "extra_ms_by_rows"})
                row["extra_ms"] = [self.burst_info["extra_ms_by_rows"][self.plan.steps[self.cfg.warmup + s].rows]
                                   for s in range(ev.step, ev.step + ev.span)]
            events.append(row)
        s = self.stack
        return {
            "path": self.path,
            "step_keys": ("ProfilerStep#N ranges of torch.profiler (prof.step() at every step boundary; "
                          f"schedule wait=1 warmup=1 active={self.cfg.steps}): N = {self.session.lead_steps} + "
                          "measured step" if self.session.stepped else
                          "id=N; NVTX range 'step id=N' (nsys), N = engine step = warm-up steps + measured step"),
            "model_stack": {"layers": lc.layers, "hidden": s.hidden, "intermediate": s.inter, "vocab": lc.vocab,
                            "qkv_out": s.qd + 2 * s.kd, "dtype": self.cfg.shape.q_dtype},
            "decode_split_kv": lc.split_kv,
            "prefill_backend": lc.prefill_backend,
            "events": events,
            "calibration": calibration,
            "graph_sizes": sorted(self.graphs),
            "requests": [asdict(r) for r in plan.requests if r.how != "steady"],
            "steady_prompts": [r.prompt for r in plan.requests if r.how == "steady"],
        }


def run_loop(rt: Runtime, cfg: RunConfig, session: Session) -> tuple[list[StepRecord], dict[str, Any]]:
    """Run the decode loop of `cfg`; return the sidecar steps (measured steps only) and the run record's
    loop-specific part (events with their keys, stall calibration, CUDA-graph sizes)."""
    return Loop(rt, cfg, session).run()
