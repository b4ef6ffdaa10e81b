"""FlashAttention-3 varlen decode through the fa3-fwd wheel (`import fa3_fwd_interface`), and its plan read back.

Decode is one query row per request: q [B, H_q, D], cu_seqlens_q = arange(B + 1), each request's K and V
contiguous in [total_k, H_kv, D] tensors delimited by cu_seqlens_k, max_seqlen_q 1, max_seqlen_k the longest
request. The wheel (0.0.3) is upstream hopper/ built bf16-only, without paged KV or local attention.

Calls: without precomputed metadata through `flash_attn_varlen_func` (what servers call); with it through
`_flash_attn_forward`, the op `flash_attn_varlen_func` calls, which alone takes `scheduler_metadata=` in this
wheel (`flash_attn_varlen_func` has no such argument; `flash_attn_with_kvcache` has, but not varlen K/V).

The plan is FA3's scheduler metadata, the int32 tensor `get_scheduler_metadata` returns (upstream
hopper/flash_api.cpp, mha_fwd_get_scheduler_metadata, and hopper/flash_prepare_scheduler.cu), B_r = B rounded
up to a multiple of 4:

    [0, B_r)        num_splits_dynamic, by virtual batch index (requests sorted by KV blocks, longest first)
    [B_r, 2 B_r)    num_m_blocks, by virtual batch index
    [2 B_r, 3 B_r)  varlen_batch_idx: virtual batch index -> request (present when batches are sorted: not local)
    [3 B_r, 4 B_r)  num_nheads_in_l2 (present with head swizzle: causal or local attention)
    last            tile_count_semaphore (Hopper: always)

The prepare kernel (`prepare_varlen_num_blocks_kernel<NumWarps, Sort>`, ceil(B / 992) CTAs) sets every split
count to 1 when it runs on more than one CTA (B > 992) or when the static split count is 1; else request b
gets clamp(ceil(n_b / blocks_per_sm), 1, S) with blocks_per_sm = ceil(1.1 * H * sum_b n_b / num_SM), n_b its KV
blocks. The static split count S (params.num_splits: `num_splits`, or FA3's heuristic for 0) is not in the
metadata: it is read as the first dimension of the forward's `out_accum` (allocated only when S > 1), and the
combine kernel runs iff S > 1. For one query row (and no pages, D = 128) FA3 turns `causal` off
(mha_fwd: "causal=true is the same as causal=false in this case").

Everything above the GPU classes is pure Python (tests use it without torch).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .config import FA3_PATH, Fa3Variant, RunConfig, fa3_serving_key, fa3_sweep_key, range_name
from .sidecar import PlanRecord, StepRecord

BACKEND = "fa3"  # the sidecar's `backend`
PLAN_INFO_MAX_INTS = 5000  # raw metadata longer than this is left out of the sidecar (its decoded splits stay)
PREPARE_MAX_BATCH_1CTA = 992  # PREPARE_VARLEN_MAX_BATCHES_1CTA: above it the prepare kernel cuts no request


# ---------------------------------------------------------------------------------------------- pure parts
def round4(n: int) -> int:
    return (n + 3) // 4 * 4


@dataclass(frozen=True)
class SchedulerMetadata:
    """FA3's scheduler metadata of one batch, decoded (lists of `batch_size` entries; see the module doc)."""

    batch_size: int
    vectors: int  # batch vectors in the tensor: 2 + sorted + head swizzle
    splits_by_virtual: list[int]  # num_splits_dynamic, by virtual batch index
    m_blocks_by_virtual: list[int]
    order: list[int] | None  # varlen_batch_idx: virtual batch index -> request; None when not sorted
    nheads_in_l2: list[int] | None
    semaphore: int | None

    @property
    def splits(self) -> list[int]:
        """Splits per request, in batch order."""
        if self.order is None:
            return list(self.splits_by_virtual)
        out = [0] * self.batch_size
        for v, b in enumerate(self.order):
            out[b] = self.splits_by_virtual[v]
        return out


def decode_metadata(ints: Sequence[int], batch_size: int, sorted_batches: bool = True) -> SchedulerMetadata:
    """Decode `get_scheduler_metadata`'s int32 tensor (as a list) for a batch of `batch_size` requests.

    The number of batch vectors follows from the length (vectors x B_r, plus one semaphore on Hopper); with 3,
    `sorted_batches` says whether the third is the batch order (any attention but local, which this wheel lacks)
    or the heads-in-L2 vector. Raises ValueError when the length or the order does not fit."""
    b, br = batch_size, round4(batch_size)
    n = len(ints)
    if b < 1 or br == 0:
        raise ValueError(f"batch size {b} is below 1")
    vectors, rest = divmod(n, br)
    if rest not in (0, 1) or vectors not in (2, 3, 4):
        raise ValueError(f"scheduler metadata of {n} ints does not fit a batch of {b} (B_r {br}): expected 2, 3 or "
                         f"4 vectors of {br} ints plus at most one semaphore")
    has_order = vectors == 4 or (vectors == 3 and sorted_batches)
    has_l2 = vectors == 4 or (vectors == 3 and not sorted_batches)
    vec = [list(ints[i * br:i * br + b]) for i in range(vectors)]
    order = vec[2] if has_order else None
    if order is not None and sorted(order) != list(range(b)):
        raise ValueError(f"scheduler metadata: the batch order (ints {2 * br}..{2 * br + b - 1}) is not a "
                         f"permutation of 0..{b - 1}")
    return SchedulerMetadata(b, vectors, vec[0], vec[1], order, vec[-1] if has_l2 else None,
                             int(ints[-1]) if rest else None)


def call_record(variant: Fa3Variant, max_seqlen_k: int) -> dict[str, Any]:
    """The sidecar step's `call` object: the arguments FA3 was called with."""
    return {"num_splits": variant.num_splits, "pack_gqa": variant.pack_gqa, "sm_margin": variant.sm_margin,
            "causal": variant.causal, "scheduler_metadata": variant.scheduler_metadata,
            "max_seqlen_k": max_seqlen_k}


def plan_record(ints: Sequence[int] | None, batch_size: int, num_splits_static: int | None) -> PlanRecord:
    """The sidecar step's `plan` from FA3's metadata ints and the static split count: `split_kv` is true when
    at least one request was cut into more than one split; `splits` per request; `plan_info` the raw ints
    (left out past PLAN_INFO_MAX_INTS); no padded batch (FA3 has none)."""
    extra: dict[str, Any] = {"num_splits_static": num_splits_static}
    split_kv = False
    if ints is not None:
        splits = decode_metadata(ints, batch_size).splits
        extra["splits"] = splits
        split_kv = any(s > 1 for s in splits)
    raw = list(ints) if ints is not None and len(ints) < PLAN_INFO_MAX_INTS else None
    return PlanRecord(None, split_kv, None, raw, extra)


def cu_seqlens(lens: Sequence[int]) -> list[int]:
    """[0, l0, l0 + l1, ...]: the prefix sums FA3's varlen interface takes."""
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return out


# ---------------------------------------------------------------------------------------------- the GPU side
@dataclass
class Fa3Batch:
    """One batch on the device: queries, cu_seqlens_q / _k, the KV lengths as seqused_k, its K/V views."""

    kv_lens: list[int]
    q: Any
    cu_q: Any
    cu_k: Any
    seqused_k: Any
    k: Any
    v: Any

    @property
    def max_seqlen_k(self) -> int:
        return max(self.kv_lens)


class Fa3Bench:
    """K and V of random values for up to `max_tokens` KV tokens ([max_tokens, H_kv, D] each, bf16), and FA3
    calls on batches laid out in them (every batch's requests consecutive from token 0)."""

    def __init__(self, rt: Any, cfg: RunConfig, max_tokens: int, max_batch: int) -> None:
        t, s = rt.torch, cfg.shape
        self.rt, self.t, self.f, self.shape = rt, t, rt.fa3, s
        self.device = t.device("cuda", t.cuda.current_device())
        self.dtype = t.bfloat16
        gen = t.Generator(device=self.device).manual_seed(cfg.seed)
        self.k = t.randn((max_tokens, s.kv_heads, s.head_dim), dtype=self.dtype, device=self.device, generator=gen)
        self.v = t.randn((max_tokens, s.kv_heads, s.head_dim), dtype=self.dtype, device=self.device, generator=gen)
        self.q = t.randn((max_batch, s.qo_heads, s.head_dim), dtype=self.dtype, device=self.device, generator=gen)
        self.scale = s.head_dim ** -0.5

    def batch(self, kv_lens: Sequence[int]) -> Fa3Batch:
        t = self.t
        lens = list(kv_lens)
        b, total = len(lens), sum(lens)
        if b > self.q.shape[0] or total > self.k.shape[0]:
            raise ValueError(f"batch of {b} requests and {total} tokens exceeds the bench "
                             f"({self.q.shape[0]}, {self.k.shape[0]})")
        i32 = {"dtype": t.int32, "device": self.device}
        return Fa3Batch(lens, self.q[:b], t.arange(b + 1, **i32), t.tensor(cu_seqlens(lens), **i32),
                        t.tensor(lens, **i32), self.k[:total], self.v[:total])

    def metadata(self, batch: Fa3Batch, var: Fa3Variant) -> Any:
        """FA3's scheduler metadata for `batch` called as `var` says (one prepare kernel)."""
        s = self.shape
        return self.f.get_scheduler_metadata(
            len(batch.kv_lens), 1, batch.max_seqlen_k, s.qo_heads, s.kv_heads, s.head_dim, batch.seqused_k,
            qkv_dtype=self.dtype, cu_seqlens_q=batch.cu_q, causal=var.causal, num_splits=var.num_splits,
            pack_gqa=var.pack_gqa, sm_margin=var.sm_margin)

    def forward(self, batch: Fa3Batch, var: Fa3Variant, md: Any) -> Any:
        """`_flash_attn_forward` (out, softmax_lse, out_accum, softmax_lse_accum), with `md` as
        scheduler_metadata (None: FA3 prepares its own)."""
        return self.f._flash_attn_forward(
            batch.q, batch.k, batch.v, None, None, None, None, batch.cu_q, batch.cu_k, None, None, None, 1,
            batch.max_seqlen_k, None, None, None, None, None, None, None, None, None, self.scale,
            causal=var.causal, scheduler_metadata=md, num_splits=var.num_splits, pack_gqa=var.pack_gqa,
            sm_margin=var.sm_margin)

    def runner(self, batch: Fa3Batch, var: Fa3Variant, md: Any) -> Callable[[], None]:
        """One decode step as `var` calls it: flash_attn_varlen_func, or _flash_attn_forward with `md`."""
        if var.scheduler_metadata:
            def run_md() -> None:
                self.forward(batch, var, md)

            return run_md
        f, max_k = self.f, batch.max_seqlen_k

        def run() -> None:
            f.flash_attn_varlen_func(batch.q, batch.k, batch.v, batch.cu_q, batch.cu_k, 1, max_k,
                                     softmax_scale=self.scale, causal=var.causal, num_splits=var.num_splits,
                                     pack_gqa=var.pack_gqa, sm_margin=var.sm_margin)

        return run

    def plan(self, batch: Fa3Batch, var: Fa3Variant) -> tuple[Any, PlanRecord]:
        """(metadata tensor, plan): the metadata read back before any forward used it, and the static split
        count from a forward with the same arguments (which also loads the kernels this call needs)."""
        md = self.metadata(batch, var)
        ints = [int(x) for x in md.tolist()]
        out = self.forward(batch, var, md if var.scheduler_metadata else None)
        accum = out[2]
        static = int(accum.shape[0]) if accum.numel() > 0 else 1
        return md, plan_record(ints, len(batch.kv_lens), static)


@dataclass
class Fa3Case:
    """One planned FA3 case of a sweep or timing run (the FlashInfer Case's interface)."""

    variant: Fa3Variant
    dist: str
    batch_size: int
    kv_lens: list[int]
    plan: PlanRecord
    run: Callable[[], None]
    path: str = FA3_PATH
    backend: str = BACKEND

    @property
    def key(self) -> str:
        return fa3_sweep_key(self.variant, self.dist, self.batch_size)

    def step_key(self, step: int) -> str:
        return fa3_sweep_key(self.variant, self.dist, self.batch_size, step)

    def record(self, key: str, cuda_graph: bool = False) -> StepRecord:
        return StepRecord(key, self.kv_lens, FA3_PATH, BACKEND, False, self.plan,
                          {"dist": self.dist, "call": call_record(self.variant, max(self.kv_lens))})


def sweep_cases(rt: Any, cfg: RunConfig) -> list[Fa3Case]:
    """Every case of `cfg` (variant x distribution x batch size), planned and run once, before any profiling:
    the measured region then holds the decode steps alone."""
    from .distributions import DISTRIBUTIONS, kv_lens

    shapes = [(d, b) for d in cfg.dists for b in cfg.batch_sizes if b >= DISTRIBUTIONS[d].min_batch]
    lens = {(d, b): kv_lens(d, b, cfg.total_tokens) for d, b in shapes}
    bench = Fa3Bench(rt, cfg, max(sum(x) for x in lens.values()), max(b for _, b in shapes))
    batches: dict[tuple[str, int], Fa3Batch] = {}
    out = []
    with rt.torch.inference_mode():
        for var in cfg.fa3.variants():
            for d, b in shapes:
                if (d, b) not in batches:
                    batches[(d, b)] = bench.batch(lens[(d, b)])
                batch = batches[(d, b)]
                md, plan = bench.plan(batch, var)
                out.append(Fa3Case(var, d, b, batch.kv_lens, plan, _inference(rt, bench.runner(batch, var, md))))
        rt.torch.cuda.synchronize()
    return out


def _inference(rt: Any, run: Callable[[], None]) -> Callable[[], None]:
    def wrapped() -> None:
        with rt.torch.inference_mode():
            run()

    return wrapped


def run_serving_fa3(rt: Any, cfg: RunConfig, session: Any) -> list[StepRecord]:
    """The serving replay (collectors/schedule.py) on FA3, once per call variant: every step's batch, metadata
    and plan are prepared (and each step run once) before the measured region, which then holds, per step,
    one range with the attention call and a synchronization."""
    from .annotate import Annotator
    from .schedule import make_requests, schedule

    t, sc = rt.torch, cfg.serving
    requests = make_requests(sc, cfg.steps, cfg.seed)
    steps = schedule(requests, sc, cfg.steps)
    longs = {r.rid for r in requests if r.long}
    bench = Fa3Bench(rt, cfg, max(sum(st.kv_lens) for st in steps), max(st.batch_size for st in steps))
    prepared = []
    with t.inference_mode():
        for var in cfg.fa3.variants():
            for st in steps:
                batch = bench.batch(st.kv_lens)
                md, plan = bench.plan(batch, var)
                key = fa3_serving_key(var, st.index, st.batch_size)
                rec = StepRecord(key, list(st.kv_lens), FA3_PATH, BACKEND, False, plan,
                                 {"live": st.batch_size, "long_requests": sum(r in longs for r in st.rids),
                                  "call": call_record(var, batch.max_seqlen_k)})
                prepared.append((rec, bench.runner(batch, var, md)))
        t.cuda.synchronize()
    ann = Annotator(t)
    records = []
    with session, t.inference_mode():
        for rec, run in prepared:
            with ann.step(range_name(rec.key)):
                run()
            t.cuda.synchronize()
            records.append(rec)
    return records


# ---------------------------------------------------------------------------------------------- smoke test
def smoke() -> int:
    """`python -m collectors.fa3_decode`: the wheel's signatures, the metadata layout of small batches, one call
    of every option checked against a float32 reference, and static split counts. Prints; 0 when all ran."""
    import inspect

    from .config import ModelShape
    from .runtime import require_gpu

    rt = require_gpu("fa3")
    t, f = rt.torch, rt.fa3
    assert f is not None  # require_gpu("fa3") imported it
    for name in ("flash_attn_varlen_func", "flash_attn_with_kvcache", "get_scheduler_metadata",
                 "_flash_attn_forward"):
        print(f"{name}{inspect.signature(getattr(f, name))}")
    print("fa3_fwd_config:", getattr(sys.modules.get("fa3_fwd_config"), "CONFIG", None) or _config())
    failures = 0
    for shape in (ModelShape(32, 4, 128), ModelShape(64, 8, 128)):
        cfg = RunConfig("sweep", "/tmp", "smoke", "none", shape)
        bench = Fa3Bench(rt, cfg, 300_000, 1100)
        for lens in ([5000, 7, 300, 1], [40_000] + [100] * 6, [200_000] + [60] * 999):
            batch = bench.batch(lens)
            for var in (Fa3Variant(), Fa3Variant(1), Fa3Variant(4), Fa3Variant(16), Fa3Variant(0, True),
                        Fa3Variant(4, True), Fa3Variant(0, False, True), Fa3Variant(0, False, False, 8)):
                try:
                    with t.inference_mode():
                        md, plan = bench.plan(batch, var)
                        bench.runner(batch, var, md)()
                        out = (bench.forward(batch, var, md)[0] if var.scheduler_metadata else
                               f.flash_attn_varlen_func(batch.q, batch.k, batch.v, batch.cu_q, batch.cu_k, 1,
                                                        batch.max_seqlen_k, causal=var.causal,
                                                        num_splits=var.num_splits, sm_margin=var.sm_margin))
                        err = _max_error(t, batch, out, shape) if len(lens) <= 8 else float("nan")
                    ints = plan.plan_info or []
                    splits = plan.extra["splits"]
                    print(f"q{shape.qo_heads}kv{shape.kv_heads} B={len(lens)} max={max(lens)} {var.tokens}: "
                          f"static={plan.extra['num_splits_static']} split_kv={plan.split_kv} "
                          f"splits[:8]={splits[:8]} max={max(splits)} md_len={len(ints)} "
                          f"md_head={ints[:12]} md_tail={ints[-3:]} err={err:.4f}")
                    if err == err and err > 0.05:
                        failures += 1
                except Exception as exc:  # noqa: BLE001 - a smoke test reports every failure and goes on
                    failures += 1
                    print(f"FAILED q{shape.qo_heads}kv{shape.kv_heads} B={len(lens)} {var.tokens}: "
                          f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        del bench
        t.cuda.empty_cache()
    print(f"smoke: {failures} failures")
    return 1 if failures else 0


def _config() -> Any:
    try:
        import fa3_fwd_config

        return fa3_fwd_config.CONFIG
    except ImportError:
        return None


def _max_error(t: Any, batch: Fa3Batch, out: Any, shape: Any) -> float:
    """Max |FA3 - float32 reference| over the batch (GQA: query head h reads KV head h // G)."""
    g = shape.qo_heads // shape.kv_heads
    worst, start = 0.0, 0
    for i, n in enumerate(batch.kv_lens):
        q = batch.q[i].float()  # [H, D]
        k = batch.k[start:start + n].float().repeat_interleave(g, dim=1)  # [n, H, D]
        v = batch.v[start:start + n].float().repeat_interleave(g, dim=1)
        p = t.softmax(t.einsum("hd,nhd->hn", q, k) * shape.head_dim ** -0.5, dim=-1)
        ref = t.einsum("hn,nhd->hd", p, v)
        worst = max(worst, float((out[i].float() - ref).abs().max()))
        start += n
    return worst


def static_splits_estimate(kv_heads: int, max_seqlen_k: int, num_sms: int, block_n: int = 176) -> int:
    """FA3's heuristic static split count for one-row varlen decode (num_splits_heuristic with total_mblocks =
    H_kv, as if B were 1; D = 128 bf16 non-causal: kBlockN 176). For the README and tests; the sidecar records
    the count read from the forward itself."""
    total_mblocks, n_blocks = kv_heads, math.ceil(max_seqlen_k / block_n)
    if total_mblocks >= 0.8 * num_sms or n_blocks <= 4:
        return 1
    top = min(128, num_sms, n_blocks)
    eff = []
    for s in range(1, top + 1):
        waves = total_mblocks * s / num_sms
        eff.append(waves / math.ceil(waves))
    best = max(eff)
    return next(s for s in range(1, top + 1) if eff[s - 1] >= 0.85 * best)


if __name__ == "__main__":
    sys.exit(smoke())
