"""Step annotations that every profiler sees: an NVTX push/pop range (Nsight Systems, Nsight Compute) and a
`torch.profiler.record_function` range (Kineto), both with the same name, 'decode <key tokens>'."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def _nvtx_functions(torch: Any) -> tuple[Callable[[str], Any], Callable[[], Any], str]:
    """(push, pop, source): the `nvtx` package when installed, else torch.cuda.nvtx. Both use the default
    domain, which is where ncu --nvtx and nsys -t nvtx look."""
    try:
        import nvtx

        return (lambda name: nvtx.push_range(message=name)), nvtx.pop_range, "nvtx"
    except ImportError:
        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop, "torch.cuda.nvtx"


class Annotator:
    """Opens one named range in NVTX and in torch.profiler around a step."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self._push, self._pop, self.source = _nvtx_functions(torch)

    def push(self, name: str) -> None:
        """Open an NVTX range only (no record_function range)."""
        self._push(name)

    def pop(self) -> None:
        self._pop()

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        self._push(name)
        try:
            with self._torch.profiler.record_function(name):
                yield
        finally:
            self._pop()
