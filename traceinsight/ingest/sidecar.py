"""Batch-composition sidecars: what each decode step held (every request's KV length), the model's attention
shape, and the planner's own decision. They fill the `batches` table of the trace they are attached to.

Two forms are read:
- `traceinsight.sidecar/1`, this project's versioned format (docs/SIDECAR.md is its specification), written by
  the collectors through `write_sidecar()`;
- the legacy `*.meta.json(.gz)` files of the H200 captures: a dict with QH/KH/HD/PAGE and `cases`, or a list of
  cases (the Nsight Systems run's meta, without kv_lens).

A step's `step_key` is matched against range names with `key_matches()`: every whitespace-separated token of the
key is one of the range name's tokens ("tc=0 dist=uniform bs=8" matches "decode tc=0 dist=uniform bs=8 step=2").
"""

from __future__ import annotations

import gzip
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from traceinsight.errors import FormatError
from traceinsight.ingest.base import Ingest

SCHEMA_NAME = "traceinsight.sidecar"
SCHEMA_MAJOR = 1
SCHEMA = f"{SCHEMA_NAME}/{SCHEMA_MAJOR}"
_SCHEMA_RE = re.compile(r"^traceinsight\.sidecar/(\d+)(?:\.(\d+))?$")

BATCH_COLUMNS = [
    "step_key",
    "batch_size",
    "kv_lens",
    "qo_heads",
    "kv_heads",
    "head_dim",
    "page_size",
    "kv_dtype",
    "path",
    "backend",
    "cuda_graph",
    "planned_padded_batch",
    "planned_split_kv",
    "planned_chunk_tokens",
    "plan_info",
    "qo_lens",
    "planned_num_splits",
    "planned_splits",
    "call_num_splits",
    "call_pack_gqa",
    "call_sm_margin",
    "call_causal",
    "call_scheduler_metadata",
    "call_max_seqlen_k",
]

# The attention call's arguments a sidecar step may record (`call`, 1.2): batches columns call_<name>.
CALL_FIELDS = ("num_splits", "pack_gqa", "sm_margin", "causal", "scheduler_metadata", "max_seqlen_k")

# FlashInfer 0.6.1 `wrapper._plan_info` layouts, told apart by their length.
PLAN_DECODE_LEN = 10  # CUDA-core decode: [padded_batch_size, ..., enable_cuda_graph, split_kv]
PLAN_FA2_LEN = 15  # FA2 prefill/tensor-core: [padded_batch_size, ..., enable_cuda_graph, split_kv]
PLAN_SM90_LEN = 9  # SM90 prefill: offsets only; this backend never splits KV

PATH_BY_TC = {0: "cuda-core", 1: "tensor-core"}
MODEL_INT_FIELDS = ("qo_heads", "kv_heads", "head_dim", "page_size")
MODEL_STR_FIELDS = ("kv_dtype", "q_dtype")

# Largest values the `batches` columns hold: INTEGER fields are int32, list elements (kv_lens, plan_info) int64.
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


# ---------------------------------------------------------------------------------------------- key matching
def key_tokens(text: str) -> list[str]:
    """The whitespace-separated tokens of a step key or range name."""
    return text.split()


def key_matches(step_key: str, range_name: str) -> bool:
    """True when every token of `step_key` is one of the tokens of `range_name` (order ignored; an empty key
    matches nothing). "tc=0 dist=uniform bs=8" matches "decode tc=0 dist=uniform bs=8 step=0", not "... bs=80"."""
    want = key_tokens(step_key)
    return bool(want) and set(want) <= set(key_tokens(range_name))


def key_matches_sql(step_key: str, range_name: str) -> str:
    """The DuckDB expression of `key_matches` over two SQL expressions (e.g. 'b.step_key', 'r.name')."""

    def toks(e: str) -> str:
        return rf"list_filter(regexp_split_to_array({e}, '\s+'), lambda x: x <> '')"

    return f"(len({toks(step_key)}) > 0 AND list_has_all({toks(range_name)}, {toks(step_key)}))"


# ---------------------------------------------------------------------------------------------- detection
def is_sidecar(doc: Any) -> bool:
    """Whether a parsed JSON document is a sidecar (ours, of any version, or a legacy meta file)."""
    if isinstance(doc, dict):
        schema = doc.get("schema")
        if isinstance(schema, str) and schema.startswith(SCHEMA_NAME):
            return True
        return "traceEvents" not in doc and isinstance(doc.get("cases"), list) and _looks_like_case_list(doc["cases"])
    if isinstance(doc, list):
        return bool(doc) and _looks_like_case_list(doc)
    return False


def _looks_like_case_list(cases: list[Any]) -> bool:
    return bool(cases) and all(isinstance(c, dict) and {"tc", "B"} <= c.keys() for c in cases[:8])


# ---------------------------------------------------------------------------------------------- validation
class _Problem(Exception):
    """A validation failure at a JSON path ('$.steps[3].kv_lens')."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: {what}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int(
    obj: dict[str, Any],
    key: str,
    where: str,
    *,
    minimum: int,
    maximum: int = INT32_MAX,
    required: bool = False,
    nullable: bool = False,
) -> None:
    if key not in obj:
        if required:
            raise _Problem(where, f"missing required field {key!r}")
        return
    v = obj[key]
    if v is None and nullable and not required:
        return
    if not _is_int(v):
        raise _Problem(f"{where}.{key}", f"expected an integer, got {_json_type(v)}")
    if v < minimum:
        raise _Problem(f"{where}.{key}", f"expected an integer >= {minimum}, got {v}")
    if v > maximum:
        raise _Problem(f"{where}.{key}", f"expected an integer <= {maximum}, got {v}")


def _str(obj: dict[str, Any], key: str, where: str, *, required: bool = False) -> None:
    if key not in obj:
        if required:
            raise _Problem(where, f"missing required field {key!r}")
        return
    v = obj[key]
    if not isinstance(v, str) or not v.strip():
        raise _Problem(f"{where}.{key}", f"expected a non-empty string, got {_json_type(v)}")


def _bool(obj: dict[str, Any], key: str, where: str, *, nullable: bool = False) -> None:
    if key in obj and not isinstance(obj[key], bool) and not (nullable and obj[key] is None):
        raise _Problem(f"{where}.{key}", f"expected true or false, got {_json_type(obj[key])}")


def _obj(v: Any, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _Problem(where, f"expected an object, got {_json_type(v)}")
    return v


def _int_list(v: Any, where: str, *, minimum: int | None) -> list[int]:
    """A list of int64 integers, each >= `minimum` when given."""
    if not isinstance(v, list):
        raise _Problem(where, f"expected a list of integers, got {_json_type(v)}")
    low = INT64_MIN if minimum is None else minimum
    for i, x in enumerate(v):
        if not _is_int(x):
            raise _Problem(f"{where}[{i}]", f"expected an integer, got {_json_type(x)}")
        if x < low:
            raise _Problem(f"{where}[{i}]", f"expected an integer >= {low}, got {x}")
        if x > INT64_MAX:
            raise _Problem(f"{where}[{i}]", f"expected an integer <= {INT64_MAX}, got {x}")
    return v


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return f"the integer {v}"
    if isinstance(v, float):
        return f"the number {v}"
    if isinstance(v, str):
        return f"the string {v!r}" if len(v) <= 40 else "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _check_model(v: Any, where: str) -> None:
    model = _obj(v, where)
    for key in MODEL_INT_FIELDS:
        _int(model, key, where, minimum=1, nullable=True)
    for key in MODEL_STR_FIELDS:
        if model.get(key) is not None:
            _str(model, key, where)


def schema_major(doc: dict[str, Any]) -> int:
    """The major version of a sidecar's `schema` field ('traceinsight.sidecar/1' -> 1)."""
    schema = doc.get("schema")
    if not isinstance(schema, str):
        raise _Problem("$.schema", f"expected the string {SCHEMA!r}, got {_json_type(schema)}")
    m = _SCHEMA_RE.match(schema)
    if not m:
        raise _Problem("$.schema", f"expected {SCHEMA!r}, got {schema!r}")
    return int(m[1])


def _validate(doc: Any) -> None:
    top = _obj(doc, "$")
    major = schema_major(top)
    if major != SCHEMA_MAJOR:
        raise _Problem(
            "$.schema", f"version {major} of the sidecar format is not supported (this reader reads {SCHEMA})"
        )
    if "gpu" in top and top["gpu"] is not None:
        gpu = _obj(top["gpu"], "$.gpu")
        if gpu.get("name") is not None:
            _str(gpu, "name", "$.gpu")
        _int(gpu, "num_sms", "$.gpu", minimum=1, nullable=True)
    if "software" in top and top["software"] is not None:
        for name, version in _obj(top["software"], "$.software").items():
            if not isinstance(version, str):
                raise _Problem(f"$.software.{name}", f"expected a version string, got {_json_type(version)}")
    if top.get("model") is not None:
        _check_model(top["model"], "$.model")
    if "steps" not in top:
        raise _Problem("$", "missing required field 'steps'")
    steps = top["steps"]
    if not isinstance(steps, list) or not steps:
        raise _Problem("$.steps", f"expected a non-empty list of steps, got {_json_type(steps)}")
    seen: dict[str, int] = {}
    for i, raw in enumerate(steps):
        where = f"$.steps[{i}]"
        step = _obj(raw, where)
        _str(step, "key", where, required=True)
        if step["key"] in seen:
            raise _Problem(f"{where}.key", f"duplicate key {step['key']!r} (also $.steps[{seen[step['key']]}])")
        seen[step["key"]] = i
        _int(step, "batch_size", where, minimum=1, required=True)
        if step.get("kv_lens") is not None:
            kv = _int_list(step["kv_lens"], f"{where}.kv_lens", minimum=0)
            if len(kv) != step["batch_size"]:
                raise _Problem(f"{where}.kv_lens", f"has {len(kv)} entries but batch_size is {step['batch_size']}")
        if step.get("qo_lens") is not None:
            qo = _int_list(step["qo_lens"], f"{where}.qo_lens", minimum=1)
            if len(qo) != step["batch_size"]:
                raise _Problem(f"{where}.qo_lens", f"has {len(qo)} entries but batch_size is {step['batch_size']}")
        for key in ("path", "backend"):
            if step.get(key) is not None:
                _str(step, key, where)
        _bool(step, "cuda_graph", where, nullable=True)
        if step.get("plan") is not None:
            plan = _obj(step["plan"], f"{where}.plan")
            _int(plan, "padded_batch_size", f"{where}.plan", minimum=1, nullable=True)
            _bool(plan, "split_kv", f"{where}.plan", nullable=True)
            _int(plan, "chunk_tokens", f"{where}.plan", minimum=1, nullable=True)
            if plan.get("plan_info") is not None:
                _int_list(plan["plan_info"], f"{where}.plan.plan_info", minimum=None)
            _int(plan, "num_splits_static", f"{where}.plan", minimum=1, nullable=True)
            if plan.get("splits") is not None:
                sp = _int_list(plan["splits"], f"{where}.plan.splits", minimum=1)
                if len(sp) != step["batch_size"]:
                    raise _Problem(f"{where}.plan.splits", f"has {len(sp)} entries but batch_size is "
                                   f"{step['batch_size']}")
        if step.get("call") is not None:
            call = _obj(step["call"], f"{where}.call")
            _int(call, "num_splits", f"{where}.call", minimum=0, nullable=True)
            _int(call, "sm_margin", f"{where}.call", minimum=0, nullable=True)
            _int(call, "max_seqlen_k", f"{where}.call", minimum=1, maximum=INT64_MAX, nullable=True)
            for key in ("pack_gqa", "causal", "scheduler_metadata"):
                _bool(call, key, f"{where}.call", nullable=True)
        if step.get("model") is not None:
            _check_model(step["model"], f"{where}.model")


def validate(doc: Any, source: str | os.PathLike[str] | None = None) -> None:
    """Check a `traceinsight.sidecar/1` document; raise FormatError naming the JSON path of the first problem
    ("$.steps[3].kv_lens: has 7 entries but batch_size is 8"), prefixed by `source` when given."""
    try:
        _validate(doc)
    except _Problem as exc:
        prefix = f"{source}: sidecar " if source is not None else "sidecar "
        raise FormatError(f"{prefix}{exc}") from None


# ---------------------------------------------------------------------------------------------- writing
def write_sidecar(path: Path, doc: dict[str, Any]) -> None:
    """Validate `doc` and write it as JSON to `path` atomically (a temporary file in the same folder, then
    renamed); gzip-compressed when the name ends with '.gz'."""
    validate(doc, source=path)
    data = json.dumps(doc, indent=1, ensure_ascii=False).encode() + b"\n"
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------------------------- reading
def from_document(doc: Any, path: Path) -> Ingest:
    """Turn a parsed sidecar (ours or a legacy meta file) into `batches` rows."""
    if isinstance(doc, dict) and "schema" in doc:
        validate(doc, source=path)
        return _from_v1(doc)
    try:
        return _from_legacy(doc)
    except _Problem as exc:
        raise FormatError(f"{path}: legacy meta sidecar {exc}") from None


def _new_ingest(format_version: str) -> tuple[Ingest, dict[str, list[Any]]]:
    ingest = Ingest(format="sidecar", format_version=format_version)
    return ingest, ingest.columns("batches", BATCH_COLUMNS)


def _from_v1(doc: dict[str, Any]) -> Ingest:
    ingest, cols = _new_ingest(doc["schema"])
    software = doc.get("software") or {}
    ingest.tool_version = ", ".join(f"{k} {v}" for k, v in software.items()) or None
    base_model = doc.get("model") or {}
    for step in doc["steps"]:
        model = {**base_model, **{k: v for k, v in (step.get("model") or {}).items() if v is not None}}
        plan = step.get("plan") or {}
        row = {
            "step_key": step["key"],
            "batch_size": step["batch_size"],
            "kv_lens": step.get("kv_lens"),
            "qo_heads": model.get("qo_heads"),
            "kv_heads": model.get("kv_heads"),
            "head_dim": model.get("head_dim"),
            "page_size": model.get("page_size"),
            "kv_dtype": model.get("kv_dtype"),
            "path": step.get("path"),
            "backend": step.get("backend"),
            "cuda_graph": step.get("cuda_graph"),
            "planned_padded_batch": plan.get("padded_batch_size"),
            "planned_split_kv": plan.get("split_kv"),
            "planned_chunk_tokens": plan.get("chunk_tokens"),
            "plan_info": plan.get("plan_info"),
            "qo_lens": step.get("qo_lens"),
            "planned_num_splits": plan.get("num_splits_static"),
            "planned_splits": plan.get("splits"),
            **{f"call_{k}": (step.get("call") or {}).get(k) for k in CALL_FIELDS},
        }
        for name in BATCH_COLUMNS:
            cols[name].append(row[name])
    return ingest


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


def _from_legacy(doc: Any) -> Ingest:
    if isinstance(doc, dict):
        cases, where = doc.get("cases"), "$.cases"
        shape: dict[str, Any] = {}
        for key, legacy in zip(MODEL_INT_FIELDS, ("QH", "KH", "HD", "PAGE"), strict=True):
            _int(doc, legacy, "$", minimum=1, nullable=True)
            shape[key] = doc.get(legacy)
        version = "legacy-sweep-meta"
    else:
        cases, where = doc, "$"
        shape = dict.fromkeys(MODEL_INT_FIELDS)
        version = "legacy-case-list"
    if not isinstance(cases, list) or not cases:
        raise _Problem(where, f"expected a non-empty list of cases, got {_json_type(cases)}")
    ingest, cols = _new_ingest(version)
    seen: dict[str, int] = {}
    for i, raw in enumerate(cases):
        at = f"{where}[{i}]"
        case = _obj(raw, at)
        _int(case, "tc", at, minimum=0, required=True)
        if case["tc"] not in PATH_BY_TC:
            raise _Problem(f"{at}.tc", f"expected 0 (CUDA-core) or 1 (tensor-core), got {case['tc']}")
        _str(case, "dist", at, required=True)
        _int(case, "B", at, minimum=1, required=True)
        if case.get("backend") is not None:
            _str(case, "backend", at)
        kv_lens = None
        if case.get("kv_lens") is not None:
            kv_lens = _int_list(case["kv_lens"], f"{at}.kv_lens", minimum=0)
            if len(kv_lens) != case["B"]:
                raise _Problem(f"{at}.kv_lens", f"has {len(kv_lens)} entries but B is {case['B']}")
        plan_info = None
        if case.get("plan_info") is not None:
            plan_info = _int_list(case["plan_info"], f"{at}.plan_info", minimum=None)
        key = legacy_step_key(case)
        if key in seen:
            raise _Problem(at, f"duplicate case {key!r} (also {where}[{seen[key]}])")
        seen[key] = i
        plan = legacy_plan(case["tc"], plan_info, case.get("backend"))
        row = {
            "step_key": key,
            "batch_size": case["B"],
            "kv_lens": kv_lens,
            **shape,
            "kv_dtype": None,
            "path": PATH_BY_TC[case["tc"]],
            "backend": plan["backend"],
            "cuda_graph": plan["cuda_graph"],
            "planned_padded_batch": plan["planned_padded_batch"],
            "planned_split_kv": plan["planned_split_kv"],
            "planned_chunk_tokens": None,
            "plan_info": plan_info,
            "qo_lens": None,
            "planned_num_splits": None,
            "planned_splits": None,
            **{f"call_{k}": None for k in CALL_FIELDS},
        }
        for name in BATCH_COLUMNS:
            cols[name].append(row[name])
    return ingest
