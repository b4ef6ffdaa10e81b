"""PyTorch SDPA decode through every backend, under torch.profiler: `python -m collectors.sdpa --out DIR`.

Each step is one `torch.nn.functional.scaled_dot_product_attention` call inside `sdpa_kernel(SDPBackend.X)`:
one query row per request over a batch of different KV lengths (collectors/sdpa_plan.py: cases and layouts).
Before profiling, every (backend, layout) is tried once and its output compared with a float32 reference on the
same inputs (relative Frobenius error); layouts a backend refuses are recorded with torch's reason and left out.
The profiled region runs on a ProfilerStep schedule (wait 1, warm-up 1, then one ProfilerStep#N per step, each
ending with a device synchronize), `record_shapes=True`, and a `record_function` range per step naming backend,
layout, case, batch size and repeat.

Writes NAME.pt.trace.json.gz and NAME.sidecar.json.gz (`traceinsight.sidecar/1.1`: per step the batch's attended
KV lengths, qo_lens of ones, backend `torch-sdpa-<backend>`, and under `sdpa` the layout, the requested lengths,
the padded length, the tensor shapes, the mask and enable_gqa; `run` holds what was refused and the errors).
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

from traceinsight.errors import ToolMissingError, TraceInsightError

from . import sidecar
from .sdpa_plan import (
    BACKENDS,
    CASES,
    LAYOUTS,
    LEAD_STEPS,
    Case,
    Shape,
    Step,
    attended,
    gqa,
    masked,
    plan_steps,
    scaled,
)


def _torch() -> Any:
    """torch with a CUDA device; ToolMissingError (one line) otherwise."""
    try:
        import torch
    except ImportError:
        raise ToolMissingError("the SDPA collector needs torch (with CUDA) and an NVIDIA GPU") from None
    if not torch.cuda.is_available():
        raise ToolMissingError(f"the SDPA collector needs an NVIDIA GPU: torch {torch.__version__} sees no CUDA "
                               "device")
    return torch


class Inputs:
    """Random bf16 inputs of one case (never zeros): q [B, H, 1, D], K/V with H_kv heads, the key mask."""

    def __init__(self, t: Any, shape: Shape, case: Case, seed: int) -> None:
        dev = t.device("cuda")
        gen = t.Generator(device=dev).manual_seed(seed)
        b, n = case.batch_size, case.max_len
        self.q = t.randn((b, shape.qo_heads, 1, shape.head_dim), device=dev, dtype=t.bfloat16, generator=gen)
        self.k = t.randn((b, shape.kv_heads, n, shape.head_dim), device=dev, dtype=t.bfloat16, generator=gen)
        self.v = t.randn((b, shape.kv_heads, n, shape.head_dim), device=dev, dtype=t.bfloat16, generator=gen)
        lens = t.tensor(case.kv_lens, device=dev)
        self.mask = (t.arange(n, device=dev)[None, :] < lens[:, None])[:, None, None, :]  # [B, 1, 1, L]
        self.group = shape.qo_heads // shape.kv_heads
        self._mha: tuple[Any, Any] | None = None

    def kv(self, layout: str) -> tuple[Any, Any]:
        if gqa(layout):
            return self.k, self.v
        if self._mha is None:
            self._mha = (self.k.repeat_interleave(self.group, dim=1), self.v.repeat_interleave(self.group, dim=1))
        return self._mha

    def reference(self, t: Any, layout: str) -> Any:
        """float32 attention of the layout's semantics (masked: each request's own length; padded: all)."""
        k = self.k.float().repeat_interleave(self.group, dim=1)
        v = self.v.float().repeat_interleave(self.group, dim=1)
        s = (self.q.float() @ k.transpose(-1, -2)) * self.q.shape[-1] ** -0.5
        if masked(layout):
            s = s.masked_fill(~self.mask, float("-inf"))
        return t.softmax(s, dim=-1) @ v


def call(t: Any, inputs: Inputs, backend: str, layout: str) -> Any:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    k, v = inputs.kv(layout)
    kw: dict[str, Any] = {"enable_gqa": True} if gqa(layout) else {}
    if masked(layout):
        kw["attn_mask"] = inputs.mask
    with sdpa_kernel(getattr(SDPBackend, BACKENDS[backend])):
        return t.nn.functional.scaled_dot_product_attention(inputs.q, k, v, **kw)


def probe(t: Any, inputs: dict[str, Inputs], backends: list[str]) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """Try every backend x layout on every case; keep those that run on all cases. Returns the runs and a record:
    each accepted run's worst relative error against the float32 reference, each refusal's first line."""
    runs: list[tuple[str, str]] = []
    record: dict[str, Any] = {}
    for backend in backends:
        for layout in LAYOUTS:
            errs: list[float] = []
            refused = None
            for case, x in inputs.items():
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    try:
                        out = call(t, x, backend, layout)
                        t.cuda.synchronize()
                    except Exception as exc:  # noqa: BLE001 - torch refuses with RuntimeError or others
                        why = [str(exc).strip().splitlines()[0][:300]] if str(exc).strip() else [type(exc).__name__]
                        why += [str(w.message).strip().splitlines()[0][:300] for w in caught]
                        refused = f"{case}: " + " | ".join(why)
                        break
                ref = x.reference(t, layout)
                errs.append(float((out.float() - ref).norm() / ref.norm()))
            name = f"{backend}/{layout}"
            if refused is None:
                runs.append((backend, layout))
                record[name] = {"runs": True, "max_rel_err_vs_fp32": round(max(errs), 6)}
            else:
                record[name] = {"runs": False, "error": refused}
            print(f"[sdpa] {name}: {record[name]}", file=sys.stderr, flush=True)
    return runs, record


def export(prof: Any, path: Path) -> None:
    raw = path.with_name(path.name.removesuffix(".gz"))
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as src, gzip.open(path, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()


def step_record(st: Step, shape: Shape, inputs: Inputs) -> sidecar.StepRecord:
    k, _ = inputs.kv(st.layout)
    detail = {"backend": st.backend, "layout": st.layout, "case": st.case.name, "repeat": st.repeat,
              "enable_gqa": gqa(st.layout), "mask": "key-padding [B, 1, 1, L_max] bool" if masked(st.layout) else None,
              "kv_lens_requested": list(st.case.kv_lens), "padded_to": st.case.max_len,
              "q_shape": list(inputs.q.shape), "kv_shape": list(k.shape), "range": st.range_name,
              "sdpa_kernel": f"SDPBackend.{BACKENDS[st.backend]}"}
    return sidecar.StepRecord(st.key, attended(st.case, st.layout), "sdpa", f"torch-sdpa-{st.backend}", False,
                              sidecar.PlanRecord(None, None, None, None),
                              {"qo_lens": [1] * st.case.batch_size, "step": st.measured, "sdpa": detail})


def run(out: Path, name: str, repeats: int, tiny: bool, seed: int, backends: list[str]) -> list[Path]:
    t = _torch()
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    shape = Shape()
    cases = scaled(CASES, 16) if tiny else CASES
    inputs = {c.name: Inputs(t, shape, c, seed + i) for i, c in enumerate(cases)}
    runs, probed = probe(t, inputs, backends)
    if not runs:
        raise ToolMissingError("no SDPA backend ran on this GPU (see the [sdpa] lines above)")
    steps = plan_steps(runs, cases, repeats)
    for st in steps:  # one more call each, outside the profiler (module loading, cuDNN plan building)
        call(t, inputs[st.case.name], st.backend, st.layout)
    t.cuda.synchronize()
    out.mkdir(parents=True, exist_ok=True)
    trace = out / f"{name}.pt.trace.json.gz"
    first = steps[0]
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                   schedule=schedule(wait=1, warmup=1, active=len(steps), repeat=1),
                   on_trace_ready=lambda p: export(p, trace))
    with prof:
        for _ in range(LEAD_STEPS):
            call(t, inputs[first.case.name], first.backend, first.layout)
            t.cuda.synchronize()
            prof.step()
        for st in steps:
            with record_function(st.range_name):
                call(t, inputs[st.case.name], st.backend, st.layout)
                t.cuda.synchronize()
            prof.step()
    props = t.cuda.get_device_properties(0)
    gpu = {"name": props.name, "num_sms": props.multi_processor_count,
           "compute_capability": f"{props.major}.{props.minor}", "total_mem_bytes": props.total_memory,
           "l2_bytes": getattr(props, "L2_cache_size", None)}
    software = {"torch": t.__version__, "cuda": str(t.version.cuda), "cudnn": str(t.backends.cudnn.version())}
    model = {"qo_heads": shape.qo_heads, "kv_heads": shape.kv_heads, "head_dim": shape.head_dim,
             "kv_dtype": "bfloat16", "q_dtype": "bfloat16"}
    records = [step_record(st, shape, inputs[st.case.name]) for st in steps]
    run_rec = {"kind": "sdpa", "collector": "traceinsight collectors (collectors/sdpa.py)", "seed": seed,
               "tiny": tiny, "repeats": repeats, "cases": {c.name: list(c.kv_lens) for c in cases},
               "probe": probed, "runs": [f"{b}/{lay}" for b, lay in runs],
               "step_keys": f"ProfilerStep#N, N = {LEAD_STEPS} + measured step (schedule wait=1 warmup=1)",
               "command": "python -m collectors.sdpa " + " ".join(sys.argv[1:])}
    doc = sidecar.document(gpu, software, model, records, run=run_rec)
    side = sidecar.write(out / f"{name}.sidecar.json.gz", doc)
    return [trace, side]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m collectors.sdpa", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--name", default="sdpa_q32kv4d128_torch")
    ap.add_argument("--steps", type=int, default=3, help="repeats of each case per backend and layout")
    ap.add_argument("--tiny", action="store_true", help="KV lengths / 16 (the smoke run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    a = ap.parse_args(argv)
    backends = [b for b in a.backends.split(",") if b]
    bad = [b for b in backends if b not in BACKENDS]
    if bad or a.steps < 1:
        why = (f"unknown backend {bad[0]!r} (choose from {', '.join(BACKENDS)})" if bad
               else f"--steps must be at least 1, got {a.steps}")
        print(f"traceinsight: error: {why}", file=sys.stderr)
        return 2
    try:
        made = run(a.out, a.name, a.steps, a.tiny, a.seed, backends)
    except TraceInsightError as exc:
        print(f"traceinsight: error: {exc}", file=sys.stderr)
        return 2
    for path in made:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
