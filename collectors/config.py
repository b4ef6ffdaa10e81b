"""What a collection run is: the model shape, the decode paths, the cases or the serving replay, the profiler.

Everything here is plain data (JSON-serializable dataclasses) so that a run can be handed to a child process
(the nsys / ncu re-execution) as one JSON file. Pure Python: no torch needed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .distributions import DEFAULT_TOTAL_TOKENS

KINDS = ("sweep", "serving", "timing", "loop")
# Attention libraries: FlashInfer's decode wrappers on a paged KV cache (collectors/flashinfer_decode.py), or
# FlashAttention-3's varlen forward on contiguous per-request KV (collectors/fa3_decode.py, the fa3-fwd wheel).
BACKENDS = ("flashinfer", "fa3")
PROFILERS = ("torch", "nsys", "ncu", "none")
KV_DTYPES = ("bf16", "fp16", "fp8_e4m3")
Q_DTYPES = ("bf16", "fp16")
# CLI dtype names -> torch's names without "torch." (what the sidecar's model records).
TORCH_DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp8_e4m3": "float8_e4m3fn"}

DEFAULT_BATCH_SIZES = (8, 16, 32, 64, 96, 128, 192, 256, 296, 297, 320, 384, 512)
DEFAULT_STEPS = {"sweep": 3, "serving": 200, "timing": 30, "loop": 240}
DEFAULT_WARMUP = {"sweep": 5, "serving": 5, "timing": 5, "loop": 10}

# Metrics for `--profiler ncu`: durations, DRAM traffic, launch shape and occupancy limits, and the per-SM
# active cycles whose min/avg/max measure SM load imbalance (1 - avg/max = idle share of the critical SM time).
NCU_METRICS = (
    "gpu__time_duration.sum",
    "sm__cycles_active.min",
    "sm__cycles_active.avg",
    "sm__cycles_active.max",
    "sm__cycles_active.sum",
    "sm__cycles_elapsed.avg",
    "sm__cycles_elapsed.max",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "dram__bytes_read.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "launch__grid_size",
    "launch__block_size",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
    "launch__waves_per_multiprocessor",
    "launch__sm_count",
)
# Attention and merge kernels of FlashInfer (CUDA-core decode, FA2 and SM90 prefill kernels, merge states).
NCU_KERNEL_REGEX = "BatchDecodeWithPagedKVCache|PrefillWithKVCache|BatchPrefillWithPagedKVCache|MergeStates"
# FlashAttention-3's varlen forward: the scheduler's prepare kernel, the persistent main kernel and the split
# combine. The main and combine kernels are `cutlass::device_kernel<flash::...>` instances, so ncu matches this
# regex against demangled names (`--kernel-name-base demangled`), not the bare function name `device_kernel`.
NCU_KERNEL_REGEX_FA3 = "FlashAttnFwdSm90|FlashAttnFwdCombine|prepare_varlen_num_blocks"


@dataclass(frozen=True)
class PathSpec:
    """A FlashInfer decode path: how the wrapper is built and the tokens that name it in step ranges."""

    name: str  # the CLI name: cuda-core | tc-fa2 | tc-auto
    use_tensor_cores: bool
    backend: str  # the wrapper's `backend` argument
    tokens: str  # what the step range names carry, e.g. "path=tensor-core backend=fa2"
    sidecar_path: str  # the sidecar's `path`: cuda-core | tensor-core


PATHS: dict[str, PathSpec] = {
    p.name: p
    for p in (
        PathSpec("cuda-core", False, "auto", "path=cuda-core", "cuda-core"),
        PathSpec("tc-fa2", True, "fa2", "path=tensor-core backend=fa2", "tensor-core"),
        PathSpec("tc-auto", True, "auto", "path=tensor-core backend=auto", "tensor-core"),
    )
}


@dataclass(frozen=True)
class ModelShape:
    """The attention shape of one layer on one GPU: heads, head_dim (elements), page size (tokens), dtypes."""

    qo_heads: int = 32
    kv_heads: int = 4
    head_dim: int = 128
    page_size: int = 16
    kv_dtype: str = "bf16"
    q_dtype: str = "bf16"

    def check(self) -> None:
        """Raise ValueError (one line) when the shape cannot be run."""
        for name in ("qo_heads", "kv_heads", "head_dim", "page_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.qo_heads % self.kv_heads:
            raise ValueError(f"--qo-heads {self.qo_heads} is not a multiple of --kv-heads {self.kv_heads}")
        if self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"unknown --kv-dtype {self.kv_dtype!r} (choose from {', '.join(KV_DTYPES)})")
        if self.q_dtype not in Q_DTYPES:
            raise ValueError(f"unknown --q-dtype {self.q_dtype!r} (choose from {', '.join(Q_DTYPES)})")

    def to_sidecar(self, paged: bool = True) -> dict[str, Any]:
        """The sidecar's `model` object (dtypes by torch's names); without `page_size` when not `paged` (FA3's
        varlen KV has no pages)."""
        out = {"qo_heads": self.qo_heads, "kv_heads": self.kv_heads, "head_dim": self.head_dim,
               "page_size": self.page_size, "kv_dtype": TORCH_DTYPE_NAMES[self.kv_dtype],
               "q_dtype": TORCH_DTYPE_NAMES[self.q_dtype]}
        if not paged:
            del out["page_size"]
        return out

    @property
    def tag(self) -> str:
        """'q32kv4d128' (+ '_fp8' for an fp8 KV cache): the shape part of default file names."""
        tag = f"q{self.qo_heads}kv{self.kv_heads}d{self.head_dim}"
        if self.page_size != 16:
            tag += f"p{self.page_size}"
        return tag + ("_fp8" if self.kv_dtype.startswith("fp8") else "")


@dataclass(frozen=True)
class ServingConfig:
    """A continuous-batching replay. Lengths are tokens; rates are requests per decode step.

    Requests arrive as a Poisson process (`arrival_rate` per step, seeded), are admitted first come first served
    while fewer than `max_batch` run, decode one token per step and leave after `output_len` tokens. Every
    `long_every`-th arrival (0: none) has a prompt of `long_len` tokens. `initial` requests are present at step 0.
    """

    max_batch: int = 256
    arrival_rate: float = 1.0
    prompt_len: tuple[int, int] = (512, 4096)
    output_len: tuple[int, int] = (64, 512)
    long_every: int = 0
    long_len: int = 131_072
    initial: int = 128
    capture_sizes: tuple[int, ...] = ()  # CUDA-graph batch sizes; () = 1, 2, 4, 8, then every 16 up to max


# The model-like decode loop (`loop`): its decode paths, profilers, scenarios and injected events.
LOOP_PATHS = ("cuda-core", "tc-fa2", "tc-auto")
LOOP_PROFILERS = ("torch", "nsys", "none")
LOOP_EVENTS = ("host-sleep", "host-cpu", "prefill", "chunked-prefill", "long-join", "gemm-burst")
# The loop's prefill / mixed steps: BatchPrefillWithPagedKVCacheWrapper's tensor-core backends (fa3: SM90 only).
PREFILL_BACKENDS = ("fa2", "fa3")
SPLIT_KV = ("auto", "off")  # off: plan(disable_split_kv=True), the FA2 tensor-core decode planner only
LOOP_SCENARIOS = ("default", "host", "prefill", "join", "none")
PATH_SHORT = {"cuda-core": "core", "tc-fa2": "fa2", "tc-auto": "auto"}

# FlashAttention-3 (`--backend fa3`): one decode path, varlen with contiguous KV per request (no pages).
FA3_PATH = "fa3-varlen"
FA3_KINDS = ("sweep", "serving", "timing")
PACK_GQA = {"auto": None, "on": True, "off": False}


@dataclass(frozen=True)
class Fa3Variant:
    """One way of calling FA3's varlen forward: the options a server passes (collectors/fa3_decode.py).

    `num_splits` 0 = FA3's heuristic; `scheduler_metadata`: the scheduler's plan is computed beforehand with
    `get_scheduler_metadata` and passed in (else the forward runs its prepare kernel itself); `sm_margin`: SMs
    left free (the persistent grid is num_SMs - sm_margin); `pack_gqa` None = FA3 decides.
    """

    num_splits: int = 0
    scheduler_metadata: bool = False
    causal: bool = False
    sm_margin: int = 0
    pack_gqa: bool | None = None

    @property
    def tokens(self) -> str:
        """What step range names carry: 'path=fa3-varlen splits=0 meta=0 causal=0 margin=0' (+ ' pack=0|1' when
        pack_gqa is forced)."""
        out = (f"path={FA3_PATH} splits={self.num_splits} meta={int(self.scheduler_metadata)} "
               f"causal={int(self.causal)} margin={self.sm_margin}")
        return out if self.pack_gqa is None else f"{out} pack={int(self.pack_gqa)}"


@dataclass(frozen=True)
class Fa3Config:
    """The FA3 call variants of a run: the cross product of these lists, in this order (splits outermost)."""

    num_splits: tuple[int, ...] = (0,)
    scheduler_metadata: tuple[bool, ...] = (False,)
    causal: tuple[bool, ...] = (False,)
    sm_margin: tuple[int, ...] = (0,)
    pack_gqa: str = "auto"

    def variants(self) -> list[Fa3Variant]:
        return [Fa3Variant(s, m, c, g, PACK_GQA[self.pack_gqa]) for s in self.num_splits
                for m in self.scheduler_metadata for c in self.causal for g in self.sm_margin]


@dataclass(frozen=True)
class LoopConfig:
    """A model-like decode loop with injected events (collectors/loop_plan.py places them). Lengths in tokens.

    `batch` decode requests (prompts uniform in `prompt_len`) decode one token per step through a `layers`-layer
    transformer stack; `scenario` (or an explicit `events` list, "KIND@STEP[:TOKENS],...", STEP counted from the
    first measured step) adds host stalls, prefills, chunked prefills and long-KV joins, the first at measured
    step `first`, then one every `spacing` steps. Host stalls last `sleep_ms` / `cpu_ms`, or, when 0,
    `stall_factor` x the median warm-up step. A `gemm-burst` event (STEP[:STEPS], `gemm_steps` by default) gives
    each of its consecutive decode steps an extra MLP of GEMMs in every layer, sized on the warm-up steps so that
    the step takes about `gemm_factor` x the median warm-up step.
    """

    batch: int = 48
    layers: int = 4
    vocab: int = 32000
    intermediate: int = 0  # MLP width; 0 = 2.5 x hidden rounded up to a multiple of 256
    scenario: str = "default"
    events: str = ""
    first: int = 22
    spacing: int = 22
    prompt_len: tuple[int, int] = (512, 4096)
    prefill_len: tuple[int, int] = (4096, 8192)
    chunk: int = 1024
    chunk_prompt: int = 4096
    join_len: int = 131_072
    onset_len: int = 32_768  # the first, moderate long join of the default and join scenarios; 0 = none
    stall_factor: float = 1.5
    sleep_ms: float = 0.0
    cpu_ms: float = 0.0
    gemm_factor: float = 1.6  # a gemm-burst step takes about this many times the median warm-up step
    gemm_steps: int = 4  # consecutive steps of a gemm-burst event without an explicit count
    split_kv: str = "auto"  # auto: the planner decides; off: disable_split_kv=True (tc-fa2 decode)
    prefill_backend: str = "fa2"  # prefill / mixed steps: BatchPrefillWithPagedKVCacheWrapper(backend=...)

    def mlp_width(self, hidden: int) -> int:
        """The MLP's intermediate width: `intermediate`, or 2.5 x hidden rounded up to a multiple of 256."""
        return self.intermediate or -(-(5 * hidden // 2) // 256) * 256


@dataclass(frozen=True)
class RunConfig:
    """One collection run, as handed to the runner (and, for nsys / ncu, to the re-executed child)."""

    kind: str
    out: str
    name: str
    profiler: str
    shape: ModelShape = field(default_factory=ModelShape)
    paths: tuple[str, ...] = ("cuda-core", "tc-fa2")
    cuda_graph: bool = False
    seed: int = 0
    steps: int = 3
    warmup: int = 5
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    dists: tuple[str, ...] = ("uniform", "skew40", "skew60", "skew80", "two40")
    total_tokens: int = DEFAULT_TOTAL_TOKENS
    serving: ServingConfig = field(default_factory=ServingConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    ncu_metrics: tuple[str, ...] = NCU_METRICS
    ncu_kernels: str = NCU_KERNEL_REGEX
    workspace_mb: int = 512
    keep_nsys_rep: bool = True
    gzip_sidecar: bool = False
    backend: str = "flashinfer"
    fa3: Fa3Config = field(default_factory=Fa3Config)
    ncu_name_base: str = "function"  # ncu --kernel-name-base: what -k regex: is matched against
    # ncu sections (SpeedOfLight, LaunchStats, ...): the details page, ncu's default CSV layout, instead of the raw
    # page with `ncu_metrics`; empty = the raw page.
    ncu_sections: tuple[str, ...] = ()

    @property
    def model(self) -> dict[str, Any]:
        """The sidecar's `model`: no page size for FA3 (contiguous varlen KV)."""
        return self.shape.to_sidecar(paged=self.backend != "fa3")

    @property
    def sidecar_path(self) -> Path:
        return self.output(".sidecar.json.gz" if self.gzip_sidecar else ".sidecar.json")

    @property
    def out_dir(self) -> Path:
        return Path(self.out)

    def output(self, suffix: str) -> Path:
        """The run's file with this suffix: out/name + suffix ('.sidecar.json', '.ncu.csv', ...)."""
        return self.out_dir / f"{self.name}{suffix}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        raw: dict[str, Any] = json.loads(text)
        serving = raw.pop("serving")
        serving["prompt_len"] = tuple(serving["prompt_len"])
        serving["output_len"] = tuple(serving["output_len"])
        serving["capture_sizes"] = tuple(serving["capture_sizes"])
        loop = raw.pop("loop", {})
        loop = {k: tuple(v) if isinstance(v, list) else v for k, v in loop.items()}
        fa3 = raw.pop("fa3", {})
        fa3 = {k: tuple(v) if isinstance(v, list) else v for k, v in fa3.items()}
        tuples = {k: tuple(v) for k, v in raw.items() if isinstance(v, list)}
        return cls(**{**raw, **tuples, "shape": ModelShape(**raw.pop("shape")), "serving": ServingConfig(**serving),
                      "loop": LoopConfig(**loop), "fa3": Fa3Config(**fa3)})


def default_name(kind: str, shape: ModelShape, cuda_graph: bool, profiler: str, path: str | None = None) -> str:
    """'sweep_q32kv4d128_torch', 'serving_q64kv8d128_graph_nsys', 'loop_q64kv8d128_fa2_torch' (a loop runs one
    `path`, named by its short name), ...: the stem of a run's files."""
    tag = f"{kind}_{shape.tag}" + (f"_{PATH_SHORT.get(path, path)}" if path else "")
    return tag + ("_graph" if cuda_graph else "") + f"_{profiler}"


# ---------------------------------------------------------------------------------------------- step names
def sweep_key(path: str, dist: str, batch_size: int, step: int) -> str:
    """The sidecar key of a sweep step; its range is named 'decode ' + key."""
    return f"{PATHS[path].tokens} dist={dist} bs={batch_size} step={step}"


def case_key(path: str, dist: str, batch_size: int) -> str:
    """The key of a sweep case (timing mode: one entry per case, no step token)."""
    return f"{PATHS[path].tokens} dist={dist} bs={batch_size}"


def serving_key(path: str, step: int, batch_size: int, live: int | None = None) -> str:
    """The sidecar key of a serving step; `live` (CUDA graph only) is the number of real requests when the
    batch was padded up to a captured size."""
    key = f"{PATHS[path].tokens} step={step} bs={batch_size}"
    return key if live is None else f"{key} live={live}"


def range_name(key: str) -> str:
    """The NVTX / record_function range name of a step: 'decode ' + its key."""
    return f"decode {key}"


def fa3_sweep_key(variant: Fa3Variant, dist: str, batch_size: int, step: int | None = None) -> str:
    """The key of an FA3 sweep step ('path=fa3-varlen splits=0 meta=0 causal=0 margin=0 dist=skew80 bs=993
    step=0'); without `step`, the case key (timing)."""
    key = f"{variant.tokens} dist={dist} bs={batch_size}"
    return key if step is None else f"{key} step={step}"


def fa3_serving_key(variant: Fa3Variant, step: int, batch_size: int) -> str:
    """The key of an FA3 serving step: 'path=fa3-varlen splits=0 meta=0 causal=0 margin=0 step=17 bs=990'."""
    return f"{variant.tokens} step={step} bs={batch_size}"
