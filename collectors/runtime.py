"""The GPU side's imports, done lazily: torch, flashinfer and nvtx are only needed when a run starts.

`require_gpu()` turns a missing package or a machine without a CUDA device into one-line ToolMissingErrors,
so that importing the collectors (and the traceinsight CLI) never needs the [collect] extra.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType
from typing import Any

from traceinsight.errors import ToolMissingError

MISSING_EXTRA = (
    "collecting needs the [collect] extra: pip install 'traceinsight-attention[collect]' "
    "(torch, flashinfer-python==0.6.1, nvtx) and an NVIDIA GPU"
)
MISSING_FA3 = (
    "collecting with --backend fa3 needs torch, the fa3-fwd wheel (pip install fa3-fwd==0.0.3: "
    "import fa3_fwd_interface) and an NVIDIA Hopper GPU"
)


@dataclass(frozen=True)
class Runtime:
    """The imported GPU stack."""

    torch: ModuleType
    flashinfer: ModuleType | None
    fa3: ModuleType | None = None  # fa3_fwd_interface (--backend fa3)


def require_gpu(backend: str = "flashinfer") -> Runtime:
    """Import torch and the backend's library (flashinfer, or fa3_fwd_interface for `fa3`) and check for a CUDA
    device; raise ToolMissingError (one line) otherwise.

    Unless TORCH_CPP_LOG_LEVEL is set, torch's C++ warnings are limited to errors: the profiler would otherwise
    print one line per step about pausing CPU-op collection (docs/COLLECTORS.md)."""
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    missing = MISSING_FA3 if backend == "fa3" else MISSING_EXTRA
    try:
        import torch
    except ImportError:
        raise ToolMissingError(missing) from None
    try:
        if backend == "fa3":
            import fa3_fwd_interface as lib
        else:
            import flashinfer as lib
    except ImportError:
        raise ToolMissingError(missing) from None
    if not torch.cuda.is_available():
        raise ToolMissingError(
            f"collecting needs an NVIDIA GPU: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"
        )
    return Runtime(torch, None, lib) if backend == "fa3" else Runtime(torch, lib)


def gpu_info(rt: Runtime) -> dict[str, Any]:
    """The sidecar's `gpu`: name, SM count, compute capability, memory and L2 (bytes)."""
    props = rt.torch.cuda.get_device_properties(rt.torch.cuda.current_device())
    return {
        "name": props.name,
        "num_sms": props.multi_processor_count,
        "compute_capability": f"{props.major}.{props.minor}",
        "total_mem_bytes": props.total_memory,
        "l2_bytes": getattr(props, "L2_cache_size", None),
    }


def software_info(rt: Runtime) -> dict[str, str]:
    """The sidecar's `software`: versions of torch, flashinfer (or fa3_fwd) and the CUDA runtime torch was built
    with."""
    out = {"torch": rt.torch.__version__}
    if rt.flashinfer is not None:
        out["flashinfer"] = getattr(rt.flashinfer, "__version__", "unknown")
    out["cuda"] = str(rt.torch.version.cuda)
    for dist in (("fa3_fwd", "nvtx") if rt.fa3 is not None else ("nvtx",)):
        try:
            out[dist.replace("-", "_")] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def torch_dtype(rt: Runtime, name: str) -> Any:
    """bf16 | fp16 | fp8_e4m3 -> the torch dtype."""
    t = rt.torch
    return {"bf16": t.bfloat16, "fp16": t.float16, "fp8_e4m3": t.float8_e4m3fn}[name]
