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
from traceinsight.ingest import sidecar_legacy
from traceinsight.ingest.base import Ingest
from traceinsight.ingest.json_checks import (
    INT64_MAX,
    Problem,
    check_bool,
    check_int,
    check_obj,
    check_str,
    int_list,
    json_type,
)

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

MODEL_INT_FIELDS = ("qo_heads", "kv_heads", "head_dim", "page_size")
MODEL_STR_FIELDS = ("kv_dtype", "q_dtype")

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
def _check_model(v: Any, where: str) -> None:
    model = check_obj(v, where)
    for key in MODEL_INT_FIELDS:
        check_int(model, key, where, minimum=1, nullable=True)
    for key in MODEL_STR_FIELDS:
        if model.get(key) is not None:
            check_str(model, key, where)


def schema_major(doc: dict[str, Any]) -> int:
    """The major version of a sidecar's `schema` field ('traceinsight.sidecar/1' -> 1)."""
    schema = doc.get("schema")
    if not isinstance(schema, str):
        raise Problem("$.schema", f"expected the string {SCHEMA!r}, got {json_type(schema)}")
    m = _SCHEMA_RE.match(schema)
    if not m:
        raise Problem("$.schema", f"expected {SCHEMA!r}, got {schema!r}")
    return int(m[1])


def _validate(doc: Any) -> None:
    top = check_obj(doc, "$")
    major = schema_major(top)
    if major != SCHEMA_MAJOR:
        raise Problem(
            "$.schema", f"version {major} of the sidecar format is not supported (this reader reads {SCHEMA})"
        )
    if "gpu" in top and top["gpu"] is not None:
        gpu = check_obj(top["gpu"], "$.gpu")
        if gpu.get("name") is not None:
            check_str(gpu, "name", "$.gpu")
        check_int(gpu, "num_sms", "$.gpu", minimum=1, nullable=True)
    if "software" in top and top["software"] is not None:
        for name, version in check_obj(top["software"], "$.software").items():
            if not isinstance(version, str):
                raise Problem(f"$.software.{name}", f"expected a version string, got {json_type(version)}")
    if top.get("model") is not None:
        _check_model(top["model"], "$.model")
    if "steps" not in top:
        raise Problem("$", "missing required field 'steps'")
    steps = top["steps"]
    if not isinstance(steps, list) or not steps:
        raise Problem("$.steps", f"expected a non-empty list of steps, got {json_type(steps)}")
    seen: dict[str, int] = {}
    for i, raw in enumerate(steps):
        where = f"$.steps[{i}]"
        step = check_obj(raw, where)
        check_str(step, "key", where, required=True)
        if step["key"] in seen:
            raise Problem(f"{where}.key", f"duplicate key {step['key']!r} (also $.steps[{seen[step['key']]}])")
        seen[step["key"]] = i
        check_int(step, "batch_size", where, minimum=1, required=True)
        if step.get("kv_lens") is not None:
            kv = int_list(step["kv_lens"], f"{where}.kv_lens", minimum=0)
            if len(kv) != step["batch_size"]:
                raise Problem(f"{where}.kv_lens", f"has {len(kv)} entries but batch_size is {step['batch_size']}")
        if step.get("qo_lens") is not None:
            qo = int_list(step["qo_lens"], f"{where}.qo_lens", minimum=1)
            if len(qo) != step["batch_size"]:
                raise Problem(f"{where}.qo_lens", f"has {len(qo)} entries but batch_size is {step['batch_size']}")
        for key in ("path", "backend"):
            if step.get(key) is not None:
                check_str(step, key, where)
        check_bool(step, "cuda_graph", where, nullable=True)
        if step.get("plan") is not None:
            plan = check_obj(step["plan"], f"{where}.plan")
            check_int(plan, "padded_batch_size", f"{where}.plan", minimum=1, nullable=True)
            check_bool(plan, "split_kv", f"{where}.plan", nullable=True)
            check_int(plan, "chunk_tokens", f"{where}.plan", minimum=1, nullable=True)
            if plan.get("plan_info") is not None:
                int_list(plan["plan_info"], f"{where}.plan.plan_info", minimum=None)
            check_int(plan, "num_splits_static", f"{where}.plan", minimum=1, nullable=True)
            if plan.get("splits") is not None:
                sp = int_list(plan["splits"], f"{where}.plan.splits", minimum=1)
                if len(sp) != step["batch_size"]:
                    raise Problem(f"{where}.plan.splits", f"has {len(sp)} entries but batch_size is "
                                   f"{step['batch_size']}")
        if step.get("call") is not None:
            call = check_obj(step["call"], f"{where}.call")
            check_int(call, "num_splits", f"{where}.call", minimum=0, nullable=True)
            check_int(call, "sm_margin", f"{where}.call", minimum=0, nullable=True)
            check_int(call, "max_seqlen_k", f"{where}.call", minimum=1, maximum=INT64_MAX, nullable=True)
            for key in ("pack_gqa", "causal", "scheduler_metadata"):
                check_bool(call, key, f"{where}.call", nullable=True)
        if step.get("model") is not None:
            _check_model(step["model"], f"{where}.model")


def validate(doc: Any, source: str | os.PathLike[str] | None = None) -> None:
    """Check a `traceinsight.sidecar/1` document; raise FormatError naming the JSON path of the first problem
    ("$.steps[3].kv_lens: has 7 entries but batch_size is 8"), prefixed by `source` when given."""
    try:
        _validate(doc)
    except Problem as exc:
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
        version, rows = sidecar_legacy.rows(doc)
    except Problem as exc:
        raise FormatError(f"{path}: legacy meta sidecar {exc}") from None
    ingest, cols = _new_ingest(version)
    for row in rows:
        for name in BATCH_COLUMNS:
            cols[name].append(row.get(name))
    return ingest


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
