"""Run a collection: under nsys / ncu by re-executing it under the tool, else in this process.

`run(cfg)` is what the CLI calls; `run_direct(cfg)` is the in-process run (also what the re-executed child
does). Every run writes NAME.sidecar.json; the profiler adds its trace, timing runs NAME.timing.json.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from . import sidecar, timing
from .config import RunConfig
from .profile import Session, run_ncu, run_nsys
from .runtime import gpu_info, require_gpu, software_info


def run(cfg: RunConfig) -> list[Path]:
    """Collect as `cfg` says; return the files written."""
    if cfg.profiler in ("nsys", "ncu"):
        require_gpu(cfg.backend)  # the one-line error here rather than from inside the tool's child
        return run_nsys(cfg) if cfg.profiler == "nsys" else run_ncu(cfg)
    return run_direct(cfg)


def _run_record(cfg: RunConfig) -> dict[str, Any]:
    rec = asdict(cfg)
    for noisy in ("out", "ncu_metrics", "ncu_kernels", "keep_nsys_rep", "gzip_sidecar", "ncu_name_base",
                  "ncu_sections"):
        rec.pop(noisy)
    if cfg.backend != "fa3":
        rec.pop("fa3")
    else:
        for unused in ("cuda_graph", "workspace_mb"):
            rec.pop(unused)
        rec["shape"].pop("page_size")
    if cfg.kind != "serving":
        rec.pop("serving")
    if cfg.kind != "loop":
        rec.pop("loop")
    else:
        for unused in ("batch_sizes", "dists", "total_tokens"):
            rec.pop(unused)
    rec["collector"] = "traceinsight collectors (collectors/)"
    return rec


def run_direct(cfg: RunConfig) -> list[Path]:
    """The run itself, in this process."""
    rt = require_gpu(cfg.backend)
    rt.torch.manual_seed(cfg.seed)
    session = Session(rt, cfg)
    times: list[Any] = []
    extra: dict[str, Any] = {}
    if cfg.kind == "sweep":
        from .sweep import run_sweep

        steps, times = run_sweep(rt, cfg, session)
    elif cfg.kind == "serving":
        from .serving import run_serving

        steps = run_serving(rt, cfg, session)
    elif cfg.kind == "loop":
        from .loop import run_loop

        steps, extra = run_loop(rt, cfg, session)
    else:
        steps, times = timing.run_timing(rt, cfg)
    gpu, software = gpu_info(rt), software_info(rt)
    doc = sidecar.document(gpu, software, cfg.model, steps, run={**_run_record(cfg), **extra})
    made = [sidecar.write(cfg.sidecar_path, doc)]
    if session.trace_path is not None:
        made.insert(0, session.trace_path)
    if times:
        made.append(timing.write(cfg.output(".timing.json"), timing.document(cfg, gpu, software, times)))
    for path in made:
        print(f"[collect] wrote {path}", file=sys.stderr, flush=True)
    return made
