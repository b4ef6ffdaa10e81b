"""PyTorch SDPA decode captures (collectors/sdpa.py): the batches, the backends and input layouts tried, and the
order of the profiled steps. Pure Python, so tests check it without torch.

A decode step is one `F.scaled_dot_product_attention` call with one query row per request (q length 1) over a
batch whose requests hold different KV lengths, one of them long. SDPA takes dense K/V, so a batch is padded to
its longest request; the layouts say how the lengths and the GQA heads reach the kernel:

- `gqa-*`: K/V keep their H_kv heads and the call passes `enable_gqa=True`; `mha-*`: K/V are expanded to H_q
  heads (`repeat_interleave`), as code written before `enable_gqa` does;
- `*-masked`: a boolean key-padding mask `[B, 1, 1, L_max]` hides each request's padding, so each request attends
  its own KV length; `*-padded`: no mask (FlashAttention's SDPA backend takes none), every request attends all
  L_max positions: its attended KV length is L_max.

Each backend (`sdpa_kernel(SDPBackend.X)`) runs every layout it accepts; the GPU side records the ones it
refused, with torch's reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from .checks import at_least, one_of

# CLI / sidecar name -> torch.nn.attention.SDPBackend member
BACKENDS: dict[str, str] = {
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "math": "MATH",
}
LAYOUTS = ("gqa-padded", "gqa-masked", "mha-padded", "mha-masked")
LEAD_STEPS = 2  # the profiler schedule's wait + warm-up steps: measured step i is ProfilerStep#(LEAD_STEPS + i)


@dataclass(frozen=True)
class Shape:
    """The attention shape of one layer: query heads, KV heads, head dim (GQA group = qo_heads / kv_heads)."""

    qo_heads: int = 32
    kv_heads: int = 4
    head_dim: int = 128


@dataclass(frozen=True)
class Case:
    """A decode batch: each request's KV length (tokens, the new token included)."""

    name: str
    kv_lens: tuple[int, ...]

    @property
    def batch_size(self) -> int:
        return len(self.kv_lens)

    @property
    def max_len(self) -> int:
        return max(self.kv_lens)


# skew8: eight short requests and one of 32K, the long one last; pair2: one short and one 64K request (few CTAs:
# FlashAttention splits KV even without GQA packing); uniform64: 64 equal requests (enough CTAs: no split).
CASES = (
    Case("skew8", (1024, 1536, 2048, 3072, 4096, 768, 2560, 32768)),
    Case("pair2", (4096, 65536)),
    Case("uniform64", (4096,) * 64),
)


def scaled(cases: tuple[Case, ...], divisor: int) -> tuple[Case, ...]:
    """The cases with every KV length divided by `divisor` (at least 1 token): the smoke run's tiny batches."""
    return tuple(Case(c.name, tuple(max(1, n // divisor) for n in c.kv_lens)) for c in cases)


def masked(layout: str) -> bool:
    return layout.endswith("-masked")


def gqa(layout: str) -> bool:
    return layout.startswith("gqa-")


def attended(case: Case, layout: str) -> list[int]:
    """The KV positions each request attends: its own length under a mask, else the padded length."""
    return list(case.kv_lens) if masked(layout) else [case.max_len] * case.batch_size


@dataclass(frozen=True)
class Step:
    """One profiled step: `measured` counts from 0; its ProfilerStep#N key and its record_function range."""

    measured: int
    backend: str
    layout: str
    case: Case
    repeat: int

    @property
    def key(self) -> str:
        return f"ProfilerStep#{LEAD_STEPS + self.measured}"

    @property
    def range_name(self) -> str:
        return (f"sdpa backend={self.backend} layout={self.layout} case={self.case.name} "
                f"bs={self.case.batch_size} step={self.repeat}")


def plan_steps(runs: list[tuple[str, str]], cases: tuple[Case, ...], repeats: int) -> list[Step]:
    """The profiled steps: for each (backend, layout) that runs, in the given order, each case `repeats` times in
    a row. ValueError for an unknown backend or layout, or fewer than one repeat."""
    at_least(repeats, 1, "--steps")
    out: list[Step] = []
    for backend, layout in runs:
        one_of(backend, BACKENDS, "SDPA backend")
        one_of(layout, LAYOUTS, "layout")
        for case in cases:
            for r in range(repeats):
                out.append(Step(len(out), backend, layout, case, r))
    return out
