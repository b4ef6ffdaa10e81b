"""A/A and A/B captures of one decode loop, for calibrating a regression gate's noise (issue 29):
`python -m collectors.abtest --out DIR [--tiny] [--only NAME,...]`.

One base workload (the decode loop of collectors/loop.py: Llama-3-70B-like attention per GPU, H_q 64, H_kv 8,
D 128, FA2 tensor-core decode, 24 steady requests of 512-4096 tokens and one of 32K joining at the first measured
step, 2 layers, 40 measured steps, no other events; 2 layers keep each Kineto trace near 0.5 MB) is captured:

- A/A: `aa1`, `aa2`, `aa3`, three separate processes of the same command under torch.profiler; pairs (aa1, aa2),
  (aa2, aa3) and (aa1, aa3) are `unchanged`;
- Kineto vs Nsight Systems: `aa_nsys`, the same command under nsys (NVTX step ranges); against `aa1`, kernels
  only, `unchanged`;
- A/B, one change each against `aa1`: `ab_split_off` (plan(disable_split_kv=True): the long request walks its
  32K tokens in one CTA), `ab_cuda_core` (use_tensor_cores flipped: the CUDA-core decode kernel), `ab_mlp125`
  (MLP 25% wider), `ab_mlp103` (MLP about 3% wider: a small change in one kernel group);
- FlashAttention-3 (the fa3-fwd wheel instead of FlashInfer; `--only fa3`): its varlen
  decode sweep twice with num_splits 0 (A/A) and once with num_splits 1 (A/B against `fa3_aa1`).

The plan (runs, commands, the pairs and what each should show) is pure Python; `truth()` is what the run writes
as `abtest.truth.json` beside the traces.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from traceinsight.errors import TraceInsightError

from .runtime import require_gpu

SHAPE = ("--qo-heads", "64", "--kv-heads", "8", "--head-dim", "128")
HIDDEN = 64 * 128
MLP = 20480  # the loop's default width at hidden 8192: 2.5 x hidden, rounded up to a multiple of 256
LAYERS, VOCAB, QKV_OUT = 2, 32000, (64 + 2 * 8) * 128
BASE = (*SHAPE, "--paths", "tc-fa2", "--batch", "24", "--prompt-len", "512:4096", "--events", "long-join@0:32768",
        "--layers", str(LAYERS), "--gzip-sidecar")
FULL = ("--steps", "40", "--warmup", "6")
TINY = ("--steps", "8", "--warmup", "3")
# FlashAttention-3 (fa3-fwd wheel): the varlen decode sweep of collectors/fa3_decode.py, shape B, a skewed batch
# (one request holds 80% of the 262,144 KV tokens) and a uniform one, at 256 and 960 requests, 10 steps each.
FA3_BASE = (*SHAPE, "--backend", "fa3", "--dists", "skew80,uniform", "--batch-sizes", "256,960", "--gzip-sidecar")
FA3_FULL = ("--steps", "10")
FA3_TINY = ("--steps", "2", "--batch-sizes", "256")


def gemm_weight_elems(mlp: int) -> int:
    """Weight elements the step's GEMMs read: per layer QKV, O, gate_up, down; then the LM head."""
    return LAYERS * (QKV_OUT * HIDDEN + HIDDEN * HIDDEN + 2 * mlp * HIDDEN + HIDDEN * mlp) + VOCAB * HIDDEN


@dataclass(frozen=True)
class Run:
    """One capture: its file stem, profiler, the options added to the base command, and what it changes."""

    name: str
    profiler: str = "torch"
    args: tuple[str, ...] = ()
    change: str | None = None  # None: the base workload
    group: str | None = None  # the kernel group the change should move
    expect: str = "unchanged"  # regressed | improved | changed | unchanged (against `before`)
    detail: dict[str, Any] = field(default_factory=dict)
    backend: str = "flashinfer"  # flashinfer: the decode loop; fa3: FA3's varlen decode sweep
    before: str = "aa1"  # the run an A/B run is compared with

    def command(self, out: str, tiny: bool) -> list[str]:
        """The collector command (run from the repository root, `python -m collectors`)."""
        prof = ("--profiler", "nsys", "--drop-nsys-rep") if self.profiler == "nsys" else ("--profiler", "torch")
        if self.backend == "fa3":
            head = ["sweep", *FA3_BASE, *(FA3_TINY if tiny else FA3_FULL)]
        else:
            head = ["loop", *BASE, *(TINY if tiny else FULL)]
        return [*head, *prof, *self.args, "--out", out, "--name", self.name]


def _mlp_run(name: str, width: int, note: str) -> Run:
    share = (gemm_weight_elems(width) - gemm_weight_elems(MLP)) / gemm_weight_elems(MLP)
    return Run(name, args=("--intermediate", str(width)), change=f"MLP intermediate {MLP} -> {width} ({note})",
               group="gemm", expect="regressed",
               detail={"mlp_width_change": round(width / MLP - 1, 4),
                       "gemm_weight_bytes_change": round(share, 4),
                       "kernels": "the MLP's gate_up and down GEMMs of every layer (QKV, O and LM head unchanged)"})


RUNS: tuple[Run, ...] = (
    Run("aa1"), Run("aa2"), Run("aa3"),
    Run("aa_nsys", profiler="nsys", detail={"note": "Nsight Systems capture of the aa command: kernels only"}),
    Run("ab_split_off", args=("--split-kv", "off"), change="split-KV forced off: plan(disable_split_kv=True)",
        group="attention", expect="regressed",
        detail={"why": "FA2 decode at 25 requests splits KV (H_kv 8: its threshold is B = 33); with split off the "
                       "32K request runs in one CTA (a tail), and no merge kernel runs"}),
    Run("ab_cuda_core", args=("--paths", "cuda-core"), change="use_tensor_cores flipped: True -> False",
        group="attention", expect="changed",
        detail={"why": "BatchDecodeWithPagedKVCacheKernel (CUDA cores) instead of the FA2 prefill kernel; a path "
                       "change tensor-core -> CUDA-core; its time may go either way"}),
    _mlp_run("ab_mlp125", MLP * 5 // 4, "+25%"),
    _mlp_run("ab_mlp103", 21120, "+3.1%, a small change in one kernel group"),
    Run("fa3_aa1", args=("--num-splits", "0"), backend="fa3"),
    Run("fa3_aa2", args=("--num-splits", "0"), backend="fa3"),
    Run("fa3_ab_splits1", args=("--num-splits", "1"), backend="fa3", before="fa3_aa1",
        change="FA3 num_splits 0 (its heuristic) -> 1 (no split-KV)", group="attention", expect="regressed",
        detail={"why": "skew80 steps: the request holding 80% of the KV is walked by one CTA per KV head instead of "
                       "being split (FlashAttnFwdCombine no longer runs); uniform steps: about unchanged (no request "
                       "dominates; at 256 requests the heuristic splits them and a combine kernel runs, which "
                       "num_splits 1 removes)",
                "steps_expected_to_change": "dist=skew80"}),
)
PAIRS: tuple[tuple[str, str], ...] = (("aa1", "aa2"), ("aa2", "aa3"), ("aa1", "aa3"), ("aa1", "aa_nsys"),
                                      ("fa3_aa1", "fa3_aa2"))


def select(only: str) -> tuple[Run, ...]:
    """The runs named in `only` (comma-separated; `flashinfer` / `fa3`: all runs of that library; empty: the
    FlashInfer runs, FA3's need another wheel). ValueError naming an unknown one."""
    names = [x.strip() for x in only.split(",") if x.strip()] or ["flashinfer"]
    known = {r.name: r for r in RUNS}
    out: list[Run] = []
    for n in names:
        if n in ("flashinfer", "fa3"):
            out.extend(r for r in RUNS if r.backend == n)
        elif n in known:
            out.append(known[n])
        else:
            raise ValueError(f"--only: unknown run {n!r} (choose from flashinfer, fa3, {', '.join(known)})")
    return tuple(out)


def trace_file(run: Run) -> str:
    return f"{run.name}.sqlite" if run.profiler == "nsys" else f"{run.name}.pt.trace.json.gz"


def truth(runs: tuple[Run, ...], tiny: bool, results: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The truth document: every run (files, command, change) and every pair with what it should show."""
    by = {r.name: r for r in runs}
    pairs: list[dict[str, Any]] = []
    for a, b in PAIRS:
        if a in by and b in by:
            kind = "kineto-vs-nsys" if by[b].profiler != by[a].profiler else "A/A"
            pairs.append({"before": a, "after": b, "kind": kind, "change": None, "group": None,
                          "expect": "unchanged", "compare": "kernels only" if kind == "kineto-vs-nsys" else "all"})
    for r in runs:
        if r.change is not None and r.before in by:
            pairs.append({"before": r.before, "after": r.name, "kind": "A/B", "change": r.change, "group": r.group,
                          "expect": r.expect, **r.detail})
    return {
        "schema": "traceinsight.abtest/1",
        "what": "A/A and A/B captures of one decode loop (collectors/abtest.py)",
        "base_command": "python -m collectors " + " ".join(Run("NAME").command("OUT", tiny)),
        "fa3_base_command": "python -m collectors " + " ".join(Run("NAME", backend="fa3").command("OUT", tiny)),
        "runs": [{**{k: v for k, v in asdict(r).items() if k not in ("args",)}, "trace": trace_file(r),
                  "sidecar": f"{r.name}.sidecar.json.gz", "extra_args": list(r.args),
                  "command": "python -m collectors " + " ".join(r.command("OUT", tiny)),
                  **((results or {}).get(r.name, {}))} for r in runs],
        "pairs": pairs,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m collectors.abtest", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--tiny", action="store_true", help="8 measured steps each (the smoke run)")
    ap.add_argument("--only", default="", help="comma-separated run names, or flashinfer / fa3 for all runs of "
                    "that library (default: flashinfer)")
    ap.add_argument("--timeout", type=int, default=150, help="seconds per capture")
    ap.add_argument("--deadline", type=float, default=0, help="start no capture after this many seconds (0: none)")
    a = ap.parse_args(argv)
    try:
        runs = select(a.only)
        for backend in sorted({r.backend for r in runs}):  # one line here rather than one failed run after another
            require_gpu(backend)
    except (ValueError, TraceInsightError) as exc:
        print(f"traceinsight: error: {exc}", file=sys.stderr)
        return 2
    start, failed = time.monotonic(), 0
    results: dict[str, dict[str, Any]] = {}
    for r in runs:
        if a.deadline and time.monotonic() - start > a.deadline:
            results[r.name] = {"rc": None, "skipped": "past the deadline"}
            continue
        cmd = [sys.executable, "-m", str(__package__), *r.command(str(a.out), a.tiny)]
        print(f"[abtest] {' '.join(cmd)}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            rc = subprocess.run(cmd, timeout=a.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
        results[r.name] = {"rc": rc, "seconds": round(time.monotonic() - t0, 1)}
        failed += rc != 0
        print(f"[abtest] {r.name} rc={rc} {results[r.name]['seconds']}s", file=sys.stderr, flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "abtest.truth.json").write_text(json.dumps(truth(runs, a.tiny, results), indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
