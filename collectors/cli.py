"""`traceinsight collect KIND --out DIR [options]`: run a collector on this machine's GPU.

Importing this module needs only click and traceinsight.errors; torch, flashinfer and nvtx are imported when a
run starts. Every error (bad arguments included) is one stderr line and exit status 2.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from traceinsight.errors import TraceInsightError

from .config import (
    BACKENDS,
    DEFAULT_BATCH_SIZES,
    DEFAULT_STEPS,
    DEFAULT_WARMUP,
    FA3_KINDS,
    FA3_PATH,
    KINDS,
    LOOP_PATHS,
    LOOP_PROFILERS,
    LOOP_SCENARIOS,
    NCU_KERNEL_REGEX,
    NCU_KERNEL_REGEX_FA3,
    NCU_METRICS,
    PACK_GQA,
    PATHS,
    PREFILL_BACKENDS,
    PROFILERS,
    SPLIT_KV,
    Fa3Config,
    LoopConfig,
    ModelShape,
    RunConfig,
    ServingConfig,
    default_name,
)
from .distributions import DEFAULT_TOTAL_TOKENS, DISTRIBUTIONS


class CollectError(click.ClickException):
    """A one-line error with exit status 2, printed like the rest of the traceinsight CLI."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"traceinsight: error: {self.format_message()}", err=True)


class OneLineCommand(click.Command):
    """A click command whose usage errors (bad choice, bad integer, missing option) are one line, not the
    usage block."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise CollectError(f"collect: {exc.format_message()}") from None


# ---------------------------------------------------------------------------------------------- parsing
def _items(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_ints(text: str, option: str, minimum: int = 1) -> tuple[int, ...]:
    """'8,16,32' -> (8, 16, 32); each at least `minimum`."""
    out = []
    for item in _items(text):
        try:
            value = int(item)
        except ValueError:
            raise CollectError(f"collect: {option}: {item!r} is not an integer") from None
        if value < minimum:
            raise CollectError(f"collect: {option}: {value} is below {minimum}")
        out.append(value)
    if not out:
        raise CollectError(f"collect: {option}: empty list")
    return tuple(out)


def parse_choices(text: str, option: str, allowed: dict[str, Any] | tuple[str, ...]) -> tuple[str, ...]:
    out = tuple(_items(text))
    for item in out:
        if item not in allowed:
            raise CollectError(f"collect: {option}: unknown {item!r} (choose from {', '.join(allowed)})")
    if not out:
        raise CollectError(f"collect: {option}: empty list")
    return out


def parse_span(text: str, option: str) -> tuple[int, int]:
    """'512:4096' -> (512, 4096); '1000' -> (1000, 1000). Tokens, at least 1, low <= high."""
    parts = text.split(":")
    if len(parts) > 2:
        raise CollectError(f"collect: {option}: expected LOW:HIGH, got {text!r}")
    lo, hi = (parse_ints(p, option)[0] for p in (parts[0], parts[-1]))
    if lo > hi:
        raise CollectError(f"collect: {option}: low {lo} is above high {hi}")
    return lo, hi


def _at_least(value: float, minimum: float, option: str) -> None:
    if value < minimum:
        raise CollectError(f"collect: {option} must be at least {minimum}, got {value}")


FA3_ONLY = ("num_splits", "scheduler_metadata", "causal", "sm_margin", "pack_gqa")
BOTH = {"off": (False,), "on": (True,), "both": (False, True)}


def fa3_config(kind: str, o: dict[str, Any]) -> Fa3Config:
    """The `--backend fa3` options, checked: what the fa3-fwd wheel can run (bf16, no pages, eager)."""
    if kind not in FA3_KINDS:
        raise CollectError(f"collect: --backend fa3 runs {', '.join(FA3_KINDS)}, not {kind}")
    if o["paths"] and tuple(_items(o["paths"])) != (FA3_PATH,):
        other = next((p for p in _items(o["paths"]) if p != FA3_PATH), o["paths"])
        raise CollectError(f"collect: --paths {other} needs FlashInfer (--backend flashinfer); --backend fa3 runs "
                           f"the one path {FA3_PATH}")
    for option in ("kv_dtype", "q_dtype"):
        if o[option] != "bf16":
            raise CollectError(f"collect: --backend fa3 runs bf16 only (the fa3-fwd wheel has no fp16 or fp8 "
                               f"decode here), got --{option.replace('_', '-')} {o[option]}")
    if o["page_size"] is not None:
        raise CollectError("collect: --backend fa3 has no paged KV (each request's KV is contiguous, with "
                           "cu_seqlens_k): drop --page-size")
    if o["cuda_graph"]:
        raise CollectError("collect: --backend fa3 runs eager only (no --cuda-graph)")
    if o["head_dim"] > 256:
        raise CollectError(f"collect: --backend fa3 runs --head-dim up to 256, got {o['head_dim']}")
    splits = parse_ints(o["num_splits"] or "0", "--num-splits", minimum=0)
    if max(splits) > 256:
        raise CollectError(f"collect: --num-splits: {max(splits)} is above FA3's 256 splits")
    margins = parse_ints(o["sm_margin"] or "0", "--sm-margin", minimum=0)
    return Fa3Config(splits, BOTH[o["scheduler_metadata"] or "off"], BOTH[o["causal"] or "off"], margins,
                     o["pack_gqa"] or "auto")


def build_config(kind: str, out: Path, **o: Any) -> RunConfig:
    """Check the options and turn them into a RunConfig; CollectError (one line) on any problem."""
    profiler = o["profiler"] or ("none" if kind == "timing" else "torch")
    if kind == "timing" and profiler != "none":
        raise CollectError("collect: timing runs without a profiler (use 'sweep --profiler ...' to profile)")
    backend = o.get("backend") or "flashinfer"
    fa3 = Fa3Config()
    if backend == "fa3":
        fa3 = fa3_config(kind, o)
        o = {**o, "paths": FA3_PATH}
    else:
        given = next((k for k in FA3_ONLY if o.get(k) is not None), None)
        if given:
            raise CollectError(f"collect: --{given.replace('_', '-')} needs --backend fa3")
    page_size = 16 if o["page_size"] is None else o["page_size"]
    shape = ModelShape(o["qo_heads"], o["kv_heads"], o["head_dim"], page_size, o["kv_dtype"], o["q_dtype"])
    try:
        shape.check()
    except ValueError as exc:
        raise CollectError(f"collect: {exc}") from None
    steps = DEFAULT_STEPS[kind] if o["steps"] is None else o["steps"]
    warmup = DEFAULT_WARMUP[kind] if o["warmup"] is None else o["warmup"]
    _at_least(steps, 1, "--steps")
    _at_least(warmup, 0, "--warmup")
    _at_least(o["total_tokens"], 1, "--total-tokens")
    _at_least(o["workspace_mb"], 16, "--workspace-mb")
    paths = (FA3_PATH,) if backend == "fa3" else parse_choices(
        o["paths"] or ("tc-fa2" if kind == "loop" else "cuda-core,tc-fa2"), "--paths", PATHS)
    loop = LoopConfig()
    if kind == "loop":
        loop = loop_config(o, shape, paths, profiler, steps, warmup)
    dists = parse_choices(o["dists"], "--dists", DISTRIBUTIONS)
    batch_sizes = parse_ints(o["batch_sizes"], "--batch-sizes")
    if kind != "serving":
        if max(batch_sizes) > o["total_tokens"]:
            raise CollectError(f"collect: --total-tokens {o['total_tokens']} is below the batch size "
                               f"{max(batch_sizes)} (every request needs a token)")
        if not any(b >= DISTRIBUTIONS[d].min_batch for d in dists for b in batch_sizes):
            raise CollectError("collect: no batch size is large enough for any of the distributions")
    for option, key, minimum in (("--max-batch", "max_batch", 1), ("--arrival-rate", "arrival_rate", 0),
                                 ("--long-every", "long_every", 0), ("--long-len", "long_len", 1),
                                 ("--initial", "initial", 0)):
        _at_least(o[key], minimum, option)
    capture = parse_ints(o["capture_sizes"], "--capture-sizes") if o["capture_sizes"] else ()
    if capture and max(capture) < o["max_batch"]:
        raise CollectError(f"collect: --capture-sizes must reach --max-batch {o['max_batch']}")
    serving = ServingConfig(o["max_batch"], float(o["arrival_rate"]), parse_span(o["prompt_len"], "--prompt-len"),
                            parse_span(o["output_len"], "--output-len"), o["long_every"], o["long_len"],
                            o["initial"], capture)
    metrics = (() if o["ncu_metrics"].strip() == "none" else tuple(_items(o["ncu_metrics"])) if o["ncu_metrics"]
               else NCU_METRICS)
    if not metrics and not o["ncu_sections"]:
        raise CollectError("collect: --ncu-metrics none needs --ncu-sections (the raw page has only metrics)")
    tag = "fa3" if backend == "fa3" else paths[0] if kind == "loop" else None
    name = o["name"] or default_name(kind, shape, o["cuda_graph"], profiler, tag)
    if "/" in name or not name.strip():
        raise CollectError(f"collect: --name {name!r} must be a plain file stem")
    for section in _items(o["ncu_sections"]):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", section):
            raise CollectError(f"collect: --ncu-sections: {section!r} is not an ncu section identifier")
    kernels = o["ncu_kernels"] or (NCU_KERNEL_REGEX_FA3 if backend == "fa3" else NCU_KERNEL_REGEX)
    return RunConfig(kind, str(out), name, profiler, shape, paths, o["cuda_graph"], o["seed"], steps, warmup,
                     batch_sizes, dists, o["total_tokens"], serving, loop, metrics, kernels,
                     o["workspace_mb"], not o["drop_nsys_rep"], o["gzip_sidecar"], backend, fa3,
                     "demangled" if backend == "fa3" else "function", tuple(_items(o["ncu_sections"])))


def loop_config(o: dict[str, Any], shape: ModelShape, paths: tuple[str, ...], profiler: str, steps: int,
                warmup: int) -> LoopConfig:
    """The loop kind's options, checked (its schedule is planned once here, so a misplaced event is an error
    before any GPU work)."""
    from .loop_plan import plan_loop

    if len(paths) != 1 or paths[0] not in LOOP_PATHS:
        raise CollectError(f"collect: loop runs one decode path: --paths {' or --paths '.join(LOOP_PATHS)}")
    if profiler not in LOOP_PROFILERS:
        raise CollectError(f"collect: loop runs under --profiler {', '.join(LOOP_PROFILERS)}, not {profiler}")
    if shape.kv_dtype != shape.q_dtype:
        raise CollectError("collect: loop runs one model dtype: --kv-dtype must equal --q-dtype (bf16 or fp16)")
    if warmup < 3:
        raise CollectError(f"collect: loop needs --warmup 3 or more (the host stalls are calibrated on the warm-up "
                           f"steps), got {warmup}")
    loop = LoopConfig(o["batch"], o["layers"], o["vocab"], o["intermediate"], o["scenario"], o["events"],
                      o["first_event"], o["spacing"], parse_span(o["prompt_len"], "--prompt-len"),
                      parse_span(o["prefill_len"], "--prefill-len"), o["chunk"], o["chunk_prompt"], o["long_len"],
                      o["onset_len"], o["stall_factor"], o["sleep_ms"], o["cpu_ms"], gemm_factor=o["gemm_factor"],
                      gemm_steps=o["gemm_steps"], split_kv=o["split_kv"], prefill_backend=o["prefill_backend"])
    if loop.split_kv == "off" and paths[0] != "tc-fa2":
        raise CollectError(f"collect: --split-kv off needs --paths tc-fa2 (FlashInfer 0.6.1 takes disable_split_kv "
                           f"in its FA2 tensor-core decode planner only), got --paths {paths[0]}")
    try:
        plan = plan_loop(loop, steps, warmup, o["seed"], shape.page_size)
    except ValueError as exc:
        raise CollectError(f"collect: {exc}") from None
    if o["cuda_graph"] and any(e.kind == "gemm-burst" for e in plan.events):
        raise CollectError("collect: gemm-burst events run eager only (a decode step's CUDA graph holds the stack "
                           "without the extra MLP): drop --cuda-graph")
    return loop


# ---------------------------------------------------------------------------------------------- sdpa, abtest
EXTRA_KINDS = ("sdpa", "abtest")  # kinds with a driver of their own (collectors/sdpa.py, collectors/abtest.py)


def run_extra(kind: str, out: Path, o: dict[str, Any]) -> int:
    """Run `sdpa` or `abtest` with the options that apply to it; their own one-line errors, exit 2."""
    if kind == "sdpa":
        from . import sdpa

        args = ["--out", str(out), "--steps", str(3 if o["steps"] is None else o["steps"]), "--seed", str(o["seed"])]
        args += ["--name", o["name"]] if o["name"] else []
        return sdpa.main(args + (["--tiny"] if o["tiny"] else []))
    from . import abtest

    only = ["--only", o["only"]] if o["only"] else []
    return abtest.main(["--out", str(out), *(["--tiny"] if o["tiny"] else []), *only])


# ---------------------------------------------------------------------------------------------- the command
@click.command("collect", cls=OneLineCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("kind", type=click.Choice(KINDS + EXTRA_KINDS), metavar="KIND")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the trace, the sidecar and the timing JSON (created).")
@click.option("--name", default=None, help="File stem (default: KIND_SHAPE[_graph]_PROFILER).")
@click.option("--profiler", type=click.Choice(PROFILERS), default=None,
              help="torch: Kineto .pt.trace.json.gz; nsys: Nsight Systems SQLite export (+ .nsys-rep); ncu: "
                   "Nsight Compute CSV; none: no profiler (sweep steps are timed with CUDA events). "
                   "Default torch; timing always none.")
@click.option("--paths", default=None,
              help="Decode paths: cuda-core (use_tensor_cores=False), tc-fa2 (tensor cores, FA2 backend), "
                   "tc-auto (tensor cores, FlashInfer's choice: SM90 on Hopper for bf16). Default cuda-core,tc-fa2; "
                   "loop: one of cuda-core, tc-fa2, tc-auto (default tc-fa2); --backend fa3: fa3-varlen.")
@click.option("--batch-sizes", default=",".join(map(str, DEFAULT_BATCH_SIZES)), show_default=True,
              help="Sweep/timing batch sizes (requests).")
@click.option("--dists", default=",".join(DISTRIBUTIONS), show_default=True,
              help="Sweep/timing KV-length distributions.")
@click.option("--total-tokens", type=int, default=DEFAULT_TOTAL_TOKENS, show_default=True,
              help="Sweep/timing: KV tokens per batch, whatever the batch size.")
@click.option("--steps", type=int, default=None,
              help="Sweep: annotated steps per case (3); serving: decode steps (200); timing: timed runs per "
                   "case (30); loop: measured steps (240).")
@click.option("--warmup", type=int, default=None,
              help="Timing: untimed runs per case (5); loop: warm-up steps before the measured ones (10).")
@click.option("--qo-heads", type=int, default=32, show_default=True, help="Query heads per GPU.")
@click.option("--kv-heads", type=int, default=4, show_default=True, help="KV heads per GPU.")
@click.option("--head-dim", type=int, default=128, show_default=True, help="Head dimension (elements).")
@click.option("--page-size", type=int, default=None, help="KV page size (tokens; default 16; FlashInfer only).")
@click.option("--kv-dtype", type=click.Choice(["bf16", "fp16", "fp8_e4m3"]), default="bf16", show_default=True)
@click.option("--q-dtype", type=click.Choice(["bf16", "fp16"]), default="bf16", show_default=True)
@click.option("--cuda-graph", is_flag=True, help="Replay each step from a CUDA graph (CUDA-graph wrappers).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--max-batch", type=int, default=256, show_default=True, help="Serving: most running requests.")
@click.option("--arrival-rate", type=float, default=1.0, show_default=True,
              help="Serving: mean arrivals per decode step (Poisson).")
@click.option("--prompt-len", default="512:4096", show_default=True,
              help="Serving, loop: prompt tokens LOW:HIGH (loop: of the steady decode batch).")
@click.option("--output-len", default="64:512", show_default=True, help="Serving: output tokens LOW:HIGH.")
@click.option("--long-every", type=int, default=0, show_default=True,
              help="Serving: every N-th arrival has a --long-len prompt (0: none).")
@click.option("--long-len", type=int, default=131072, show_default=True,
              help="Serving: long prompt tokens; loop: KV tokens of the long-join request.")
@click.option("--initial", type=int, default=128, show_default=True, help="Serving: requests present at step 0.")
@click.option("--capture-sizes", default="", help="Serving --cuda-graph: batch sizes to capture "
              "(default 1,2,4,8 and every 16 up to --max-batch).")
@click.option("--batch", type=int, default=48, show_default=True,
              help="Loop: steady decode requests (choose it at or above the path's split-KV threshold).")
@click.option("--layers", type=int, default=4, show_default=True, help="Loop: transformer layers.")
@click.option("--vocab", type=int, default=32000, show_default=True, help="Loop: LM-head vocabulary.")
@click.option("--intermediate", type=int, default=0, show_default=True,
              help="Loop: MLP width (0: 2.5 x hidden, rounded up to a multiple of 256; hidden = qo_heads x head_dim).")
@click.option("--scenario", type=click.Choice(LOOP_SCENARIOS), default="default", show_default=True,
              help="Loop: injected events: default (2 host-sleep, 2 host-cpu, 2 prefill, a 4-chunk chunked "
                   "prefill, an onset join, a long join), host, prefill, join, none.")
@click.option("--events", default="",
              help="Loop: explicit events instead of the scenario, KIND@STEP[:TOKENS],... (KIND host-sleep, "
                   "host-cpu, prefill, chunked-prefill, long-join, gemm-burst; STEP a measured step; gemm-burst's "
                   ":N is its count of consecutive steps).")
@click.option("--first-event", type=int, default=22, show_default=True, help="Loop: measured step of the first event.")
@click.option("--spacing", type=int, default=22, show_default=True, help="Loop: steps from one event to the next.")
@click.option("--prefill-len", default="4096:8192", show_default=True, help="Loop: prefill prompt tokens LOW:HIGH.")
@click.option("--chunk", type=int, default=1024, show_default=True, help="Loop: chunked-prefill chunk tokens.")
@click.option("--chunk-prompt", type=int, default=4096, show_default=True,
              help="Loop: prompt tokens of a chunked prefill.")
@click.option("--onset-len", type=int, default=32768, show_default=True,
              help="Loop: KV tokens of the first, moderate long join (default and join scenarios; 0: none).")
@click.option("--stall-factor", type=float, default=1.5, show_default=True,
              help="Loop: host stalls last this many times the median warm-up step, unless --sleep-ms/--cpu-ms.")
@click.option("--sleep-ms", type=float, default=0.0, show_default=True, help="Loop: host-sleep stall (0: derived).")
@click.option("--cpu-ms", type=float, default=0.0, show_default=True, help="Loop: host-cpu stall (0: derived).")
@click.option("--gemm-factor", type=float, default=1.6, show_default=True,
              help="Loop: a gemm-burst step takes about this many times the median warm-up step (extra GEMMs).")
@click.option("--gemm-steps", type=int, default=4, show_default=True,
              help="Loop: consecutive steps of a gemm-burst event given without :STEPS.")
@click.option("--split-kv", type=click.Choice(SPLIT_KV), default="auto", show_default=True,
              help="Loop: off plans the decode wrapper with disable_split_kv=True (tc-fa2 only).")
@click.option("--prefill-backend", type=click.Choice(PREFILL_BACKENDS), default="fa2", show_default=True,
              help="Loop: BatchPrefillWithPagedKVCacheWrapper backend of prefill and mixed steps (fa3: SM90 kernels, "
                   "Hopper).")
@click.option("--ncu-metrics", default="",
              help="ncu: comma-separated metrics (default: collectors.config.NCU_METRICS); 'none' with "
                   "--ncu-sections: the sections alone.")
@click.option("--ncu-sections", default="",
              help="ncu: comma-separated sections (e.g. SpeedOfLight,LaunchStats,Occupancy,WorkloadDistribution): "
                   "write ncu's details page (its default CSV layout) with them and the --ncu-metrics instead of "
                   "the raw page.")
@click.option("--ncu-kernels", default=None,
              help=f"ncu: kernel name regex (default FlashInfer: {NCU_KERNEL_REGEX}; FA3, matched against demangled "
                   f"names: {NCU_KERNEL_REGEX_FA3}).")
@click.option("--backend", type=click.Choice(BACKENDS), default="flashinfer", show_default=True,
              help="flashinfer: FlashInfer 0.6.1 decode wrappers on a paged KV cache; fa3: FlashAttention-3 varlen "
                   "forward (fa3-fwd wheel), one query row per request, contiguous KV per request (sweep, serving, "
                   "timing; bf16; path fa3-varlen).")
@click.option("--num-splits", default=None,
              help="FA3: num_splits values to call with, e.g. 0,1,4,16 (0 = FA3's heuristic; default 0).")
@click.option("--scheduler-metadata", type=click.Choice(list(BOTH)), default=None,
              help="FA3: pass get_scheduler_metadata()'s plan as scheduler_metadata= (on), not (off, default) or "
                   "both.")
@click.option("--causal", type=click.Choice(list(BOTH)), default=None, help="FA3: causal=True (on), False (off, "
              "default) or both.")
@click.option("--sm-margin", default=None, help="FA3: sm_margin values, e.g. 0,8 (SMs left free; default 0).")
@click.option("--pack-gqa", type=click.Choice(list(PACK_GQA)), default=None,
              help="FA3: pack_gqa=None (auto, default: FA3 decides), True (on) or False (off).")
@click.option("--workspace-mb", type=int, default=512, show_default=True, help="FlashInfer float workspace (MiB).")
@click.option("--drop-nsys-rep", is_flag=True, help="nsys: keep only the SQLite export.")
@click.option("--tiny", is_flag=True, help="sdpa, abtest: the smoke run's sizes (sdpa: KV lengths / 16; abtest: 8 "
              "measured steps a run).")
@click.option("--only", default="", help="abtest: comma-separated run names (aa1, aa2, aa3, aa_nsys, ab_split_off, "
              "ab_cuda_core, ab_mlp125, ab_mlp103, fa3_aa1, fa3_aa2, fa3_ab_splits1), or flashinfer / fa3 for all "
              "runs of that library (default: flashinfer; fa3 needs the fa3-fwd wheel).")
@click.option("--gzip-sidecar", is_flag=True, help="Write NAME.sidecar.json.gz instead of NAME.sidecar.json.")
def collect(kind: str, out: Path, **options: Any) -> None:
    """Run a FlashInfer (or, with --backend fa3, FlashAttention-3) decode-attention collector on this machine's GPU
    and write an annotated trace plus a traceinsight.sidecar/1 file.

    KIND is sweep (paths x distributions x batch sizes at fixed total tokens), serving (continuous-batching
    replay), timing (the sweep's cases timed with CUDA events) or loop (a model-like decode loop with injected,
    known slow steps; FlashInfer only), sdpa (PyTorch SDPA decode through every backend, collectors/sdpa.py:
    --name, --steps, --seed, --tiny) or abtest (one decode loop captured three times, under Nsight Systems, and
    with one change each: A/A and A/B, collectors/abtest.py: --only, --tiny). Needs the [collect] extra (FA3: the
    fa3-fwd wheel) and an NVIDIA GPU.
    """
    if kind in EXTRA_KINDS:
        raise click.exceptions.Exit(run_extra(kind, out, options))
    cfg = build_config(kind, out, **options)
    from .runner import run

    try:
        made = run(cfg)
    except TraceInsightError as exc:
        raise CollectError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    for path in made:
        click.echo(str(path))
