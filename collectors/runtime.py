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


@dataclass(frozen=True)
class Runtime:
    """The imported GPU stack."""

    torch: ModuleType
    flashinfer: ModuleType


def require_gpu() -> Runtime:
    """Import torch and flashinfer and check for a CUDA device; raise ToolMissingError (one line) otherwise.

    Unless TORCH_CPP_LOG_LEVEL is set, torch's C++ warnings are limited to errors: the profiler would otherwise
    print one line per step about pausing CPU-op collection (docs/COLLECTORS.md)."""
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    try:
        import torch
    except ImportError:
        raise ToolMissingError(MISSING_EXTRA) from None
    try:
        import flashinfer
    except ImportError:
        raise ToolMissingError(MISSING_EXTRA) from None
    if not torch.cuda.is_available():
        raise ToolMissingError(
            f"collecting needs an NVIDIA GPU: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"
        )
    return Runtime(torch, flashinfer)


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
    """The sidecar's `software`: versions of torch, flashinfer and the CUDA runtime torch was built with."""
    out = {"torch": rt.torch.__version__, "flashinfer": getattr(rt.flashinfer, "__version__", "unknown"),
           "cuda": str(rt.torch.version.cuda)}
    try:
        out["nvtx"] = metadata.version("nvtx")
    except metadata.PackageNotFoundError:
        pass
    return out


def torch_dtype(rt: Runtime, name: str) -> Any:
    """bf16 | fp16 | fp8_e4m3 -> the torch dtype."""
    t = rt.torch
    return {"bf16": t.bfloat16, "fp16": t.float16, "fp8_e4m3": t.float8_e4m3fn}[name]
