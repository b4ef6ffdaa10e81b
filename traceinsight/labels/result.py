"""`Label`: what the labeler says about one kernel name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

FAMILIES = (
    "attention", "merge", "prepare", "gemm", "moe", "norm", "communication", "memory", "elementwise", "other",
)
PHASES = ("decode", "prefill", "unknown")


@dataclass(frozen=True)
class Label:
    """The label of one kernel name.

    family: one of FAMILIES. backend: an id such as 'flashinfer-cuda-core', 'fa3', 'cublas'; None when
    unknown. kernel: short display name. phase: 'decode' | 'prefill' | 'unknown', with phase_evidence
    saying why. rule: the id of the rule that matched ('fallback' when none did). params: values read
    from the template arguments (ints, bools, strings such as dtypes 'bf16'); keys per backend are listed
    in docs/LABELS.md.
    """

    family: str
    backend: str | None
    kernel: str
    phase: str
    phase_evidence: str
    rule: str
    params: Mapping[str, int | str | bool] = field(default_factory=dict, hash=False)

    @property
    def is_attention(self) -> bool:
        """True for attention kernels proper (not their merge/combine or prepare kernels)."""
        return self.family == "attention"

    @property
    def is_merge(self) -> bool:
        """True for kernels that merge/combine split-KV partial results."""
        return self.family == "merge"
