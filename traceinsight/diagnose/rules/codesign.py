"""codesign: the model's attention shape against the GPU (the checks of `traceinsight codesign`).

The shape comes from the sidecar (query and KV heads on this GPU, head_dim, KV dtype); the same functions as
the `codesign` command judge it (`traceinsight.diagnose.codesign.checks`). A sidecar records heads per GPU,
so the tensor-parallel degree is taken as 1 here: run `traceinsight codesign --tp N` for the TP checks.
It selects no launches (the checks judge one shape), so it has no query.
"""

from __future__ import annotations

from traceinsight.diagnose.codesign import Shape, checks, decode_intensity
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.rule import Input
from traceinsight.model.batches import KV_DTYPE_BYTES

ID = "codesign"
NAME = "Model co-design checks"
DESCRIPTION = "The attention shape (GQA group, head_dim, TP vs KV heads) checked against the GPU."
PASSED = "the attention shape passes the co-design checks (head_dim a multiple of 128, GQA group >= 4)"
NEEDS = (Input.SHAPE,)
OPTIONAL = ()


def _shapes(ctx: TraceAnalysis) -> dict[Shape, list[int]]:
    assert ctx.schedule is not None
    out: dict[Shape, list[int]] = {}
    for idx, b in ctx.schedule.batches.items():
        if b.source != "sidecar" or not (b.qo_heads and b.kv_heads and b.head_dim) or b.qo_heads % b.kv_heads:
            continue
        elem = KV_DTYPE_BYTES.get((b.kv_dtype or "bf16").lower(), 2)
        shape = Shape(b.qo_heads, b.kv_heads, b.head_dim, 1, {1: "fp8", 4: "fp32"}.get(elem, "bf16"))
        out.setdefault(shape, []).append(idx)
    return out


def apply(ctx: TraceAnalysis) -> list[Finding]:
    out = []
    for shape, steps in _shapes(ctx).items():
        for c in checks(shape):
            if c.ok:
                continue
            out.append(Finding(
                id=ID,
                severity=Severity(c.severity),
                steps=tuple(steps),
                summary=f"{c.message} (H_q {shape.qo_heads}, H_kv {shape.kv_heads}, head_dim {shape.head_dim})",
                evidence={"check": c.name, "qo_heads": shape.qo_heads, "kv_heads": shape.kv_heads,
                          "head_dim": shape.head_dim, "kv_dtype": shape.kv_dtype,
                          "decode_flop_per_byte": round(decode_intensity(shape.local_group_size, None,
                                                                         shape.kv_bytes, shape.q_bytes), 3),
                          **c.evidence},
                explanation=c.reason,
                remedy=("A model-design choice: see `traceinsight codesign` for the numbers (arithmetic intensity, "
                        "roofline floor per step) of alternatives."),
                saving_ns=None,
            ))
    return out
