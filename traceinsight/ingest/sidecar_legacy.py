"""The legacy `*.meta.json(.gz)` sidecars of the H200 captures: a dict with QH/KH/HD/PAGE and `cases`, or a list
of cases (the Nsight Systems run's meta, without kv_lens). Each case becomes a `batches` row; its step key is the
tokens the captures put in their range names, and the FlashInfer `_plan_info` it recorded says what the planner
decided."""

from __future__ import annotations

from typing import Any

from traceinsight.ingest.json_checks import Problem, check_int, check_obj, check_str, int_list, json_type

# FlashInfer 0.6.1 `wrapper._plan_info` layouts, told apart by their length.
PLAN_DECODE_LEN = 10  # CUDA-core decode: [padded_batch_size, ..., enable_cuda_graph, split_kv]
PLAN_FA2_LEN = 15  # FA2 prefill/tensor-core: [padded_batch_size, ..., enable_cuda_graph, split_kv]
PLAN_SM90_LEN = 9  # SM90 prefill: offsets only; this backend never splits KV

PATH_BY_TC = {0: "cuda-core", 1: "tensor-core"}
# The model shape's legacy keys, by the `batches` column they fill.
SHAPE_KEYS = {"qo_heads": "QH", "kv_heads": "KH", "head_dim": "HD", "page_size": "PAGE"}


def legacy_plan(tc: int, plan_info: list[int] | None, backend: str | None) -> dict[str, Any]:
    """What a FlashInfer 0.6.1 `_plan_info` says, by its layout: backend, padded batch, split_kv, cuda_graph.

    10 ints (CUDA-core decode): [0] padded_batch_size, [8] enable_cuda_graph, [9] split_kv.
    15 ints (FA2): [0] padded_batch_size, [13] enable_cuda_graph, [14] split_kv.
    9 ints (SM90): offsets only; never splits KV; padded batch and CUDA-graph mode are not recorded.
    """
    out: dict[str, Any] = {"backend": None, "planned_padded_batch": None, "planned_split_kv": None, "cuda_graph": None}
    n = len(plan_info) if plan_info is not None else None
    if tc == 0:
        out["backend"] = "flashinfer-cuda-core"
    elif tc == 1:
        if backend == "fa2" or n == PLAN_FA2_LEN:
            out["backend"] = "flashinfer-fa2"
        elif n == PLAN_SM90_LEN or backend == "sm90":
            out["backend"] = "flashinfer-sm90"
    if plan_info is not None and n in (PLAN_DECODE_LEN, PLAN_FA2_LEN):
        out["planned_padded_batch"] = plan_info[0]
        out["planned_split_kv"] = bool(plan_info[-1])
        out["cuda_graph"] = bool(plan_info[-2])
    elif n == PLAN_SM90_LEN:
        out["planned_split_kv"] = False
    return out


def legacy_step_key(case: dict[str, Any]) -> str:
    """The tokens the H200 captures put in their range names: 'tc=0 dist=uniform bs=8' (+ 'backend=fa2' after
    tc when the case names a backend, as in 'decode tc=1 backend=fa2 dist=uniform bs=8 step=0')."""
    parts = [f"tc={case['tc']}"]
    if case.get("backend") is not None:
        parts.append(f"backend={case['backend']}")
    parts += [f"dist={case['dist']}", f"bs={case['B']}"]
    return " ".join(parts)


def rows(doc: Any) -> tuple[str, list[dict[str, Any]]]:
    """The format version and the `batches` rows of a legacy sidecar (columns it does not know are absent);
    raises Problem at the first value that is not a legacy sidecar's."""
    if isinstance(doc, dict):
        cases, where = doc.get("cases"), "$.cases"
        shape: dict[str, Any] = {}
        for key, legacy in SHAPE_KEYS.items():
            check_int(doc, legacy, "$", minimum=1, nullable=True)
            shape[key] = doc.get(legacy)
        version = "legacy-sweep-meta"
    else:
        cases, where = doc, "$"
        shape = {}
        version = "legacy-case-list"
    if not isinstance(cases, list) or not cases:
        raise Problem(where, f"expected a non-empty list of cases, got {json_type(cases)}")
    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(cases):
        at = f"{where}[{i}]"
        case = check_obj(raw, at)
        check_int(case, "tc", at, minimum=0, required=True)
        if case["tc"] not in PATH_BY_TC:
            raise Problem(f"{at}.tc", f"expected 0 (CUDA-core) or 1 (tensor-core), got {case['tc']}")
        check_str(case, "dist", at, required=True)
        check_int(case, "B", at, minimum=1, required=True)
        if case.get("backend") is not None:
            check_str(case, "backend", at)
        kv_lens = None
        if case.get("kv_lens") is not None:
            kv_lens = int_list(case["kv_lens"], f"{at}.kv_lens", minimum=0)
            if len(kv_lens) != case["B"]:
                raise Problem(f"{at}.kv_lens", f"has {len(kv_lens)} entries but B is {case['B']}")
        plan_info = None
        if case.get("plan_info") is not None:
            plan_info = int_list(case["plan_info"], f"{at}.plan_info", minimum=None)
        key = legacy_step_key(case)
        if key in seen:
            raise Problem(at, f"duplicate case {key!r} (also {where}[{seen[key]}])")
        seen[key] = i
        plan = legacy_plan(case["tc"], plan_info, case.get("backend"))
        out.append({
            "step_key": key,
            "batch_size": case["B"],
            "kv_lens": kv_lens,
            **shape,
            "path": PATH_BY_TC[case["tc"]],
            "backend": plan["backend"],
            "cuda_graph": plan["cuda_graph"],
            "planned_padded_batch": plan["planned_padded_batch"],
            "planned_split_kv": plan["planned_split_kv"],
            "plan_info": plan_info,
        })
    return version, out
