"""FlashInfer's own API log as a sidecar: one `batches` row per `plan()` call of a paged-KV wrapper.

FlashInfer (0.5.x-0.6.x, `flashinfer/api_logging.py`) logs every decorated API call when `FLASHINFER_LOGLEVEL`
is set before it is imported, to `FLASHINFER_LOGDEST` (stdout, stderr or a file; `%i` becomes the process id):

- level 1: `[2026-12-04 16:33:39] FlashInfer API Call: BatchDecodeWithPagedKVCacheWrapper.plan`, names only;
- level 3: each call as a block: its positional arguments (`arg[0]` is the wrapper, `<... object at 0x...>`),
  keyword arguments and unset defaults, scalars as Python literals, tensors as `Tensor(shape=..., dtype=...)`
  metadata, never their values;
- level 5: tensors also get `min`, `max`, `mean`;
- level 10: level 5 plus a dump of each call's inputs to `FLASHINFER_DUMP_DIR/<time>_pid<P>_<func>_call<N>/`
  (`inputs.pt`, or `inputs.safetensors` with FLASHINFER_DUMP_SAFETENSORS=1, and `metadata.jsonl`), announced
  in the log by `Inputs dumped to: <dir>` just before the call's block. `FLASHINFER_DUMP_INCLUDE='*.plan'`
  dumps only the plan() calls (a run() dump would hold the whole KV cache).

So the exact batch composition (indptr, last_page_len, qo_indptr values) is in the level-10 dumps; the text of
levels 3 and 5 gives the batch size, the shape, the dtypes and the wrapper's path, but not the KV lengths.

This reader parses the text (plain or gzip), follows the wrappers by their address (`__init__` says
use_tensor_cores / use_cuda_graph / backend), reads each plan() call's dump when the log names one and it is
there (a dump directory is looked up beside the log, as the log names it and by its own name), and counts the
run() calls each plan served (`log_runs`), which is how the model matches plans to the trace's steps
(`traceinsight.model.log_match`, docs/SIDECAR.md). docs/SIDECAR.md describes the rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traceinsight.errors import FormatError
from traceinsight.ingest.base import Ingest
from traceinsight.ingest.flashinfer_log_text import Call, Tensor, parse
from traceinsight.ingest.sidecar import BATCH_COLUMNS

FORMAT = "flashinfer-log"
LOG_COLUMNS = [*BATCH_COLUMNS, "log_call", "log_runs"]
STEP_KEY_PREFIX = "flashinfer-log"

# Positional parameters after `self`, FlashInfer 0.6.1 (flashinfer/decode.py, flashinfer/prefill.py).
DECODE_INIT = ("float_workspace_buffer", "kv_layout", "use_cuda_graph", "use_tensor_cores", "paged_kv_indptr_buffer",
               "paged_kv_indices_buffer", "paged_kv_last_page_len_buffer", "backend", "jit_args")
PREFILL_INIT = ("float_workspace_buffer", "kv_layout", "use_cuda_graph", "qo_indptr_buf", "paged_kv_indptr_buf",
                "paged_kv_indices_buf", "paged_kv_last_page_len_buf", "custom_mask_buf", "mask_indptr_buf",
                "backend", "jit_args", "jit_kwargs")
DECODE_PLAN = ("indptr", "indices", "last_page_len", "num_qo_heads", "num_kv_heads", "head_dim", "page_size",
               "pos_encoding_mode", "window_left", "logits_soft_cap", "q_data_type", "kv_data_type", "o_data_type",
               "data_type", "sm_scale", "rope_scale", "rope_theta", "non_blocking", "block_tables", "seq_lens",
               "fixed_split_size", "disable_split_kv")
PREFILL_PLAN = ("qo_indptr", "paged_kv_indptr", "paged_kv_indices", "paged_kv_last_page_len", "num_qo_heads",
                "num_kv_heads", "head_dim_qk", "page_size", "head_dim_vo", "custom_mask", "packed_custom_mask",
                "causal", "pos_encoding_mode", "use_fp16_qk_reduction", "sm_scale", "window_left",
                "logits_soft_cap", "rope_scale", "rope_theta", "q_data_type", "kv_data_type", "o_data_type",
                "non_blocking", "prefix_len_ptr", "token_pos_in_items_ptr", "token_pos_in_items_len",
                "max_item_len_ptr", "seq_lens", "seq_lens_q", "block_tables", "max_token_per_sequence",
                "max_sequence_kv", "fixed_split_size", "disable_split_kv")
# Wrapper kinds by class name suffix (the log names a method by its instance's class: a subclass such as
# CUDAGraphBatchDecodeWithPagedKVCacheWrapper logs its parent's __init__ and plan under its own name).
DECODE_CLASS = "BatchDecodeWithPagedKVCacheWrapper"
PREFILL_CLASS = "BatchPrefillWithPagedKVCacheWrapper"
BACKEND_NAMES = {"fa2": "flashinfer-fa2", "fa3": "flashinfer-sm90"}


# ---------------------------------------------------------------------------------------------- rows
@dataclass
class _Wrapper:
    cls: str
    path: str | None
    backend: str | None
    cuda_graph: bool | None
    plan_row: int | None = None  # index of the row of its last plan()


def _kind(cls: str) -> str | None:
    if cls.endswith(DECODE_CLASS):
        return "decode"
    if cls.endswith(PREFILL_CLASS):
        return "prefill"
    return None


def _wrapper_from_init(call: Call, kind: str) -> _Wrapper:
    a = call.named(DECODE_INIT if kind == "decode" else PREFILL_INIT)
    backend_arg = a.get("backend") if isinstance(a.get("backend"), str) else "auto"
    graph = a.get("use_cuda_graph") if isinstance(a.get("use_cuda_graph"), bool) else None
    if call.cls.startswith("CUDAGraph"):
        graph = True
    if kind == "decode" and a.get("use_tensor_cores") is not True:
        return _Wrapper(call.cls, "cuda-core", "flashinfer-cuda-core", graph)
    return _Wrapper(call.cls, "tensor-core", BACKEND_NAMES.get(str(backend_arg)), graph)


def _dtype_name(v: Any) -> str | None:
    return v.removeprefix("torch.") if isinstance(v, str) and v and not v.startswith("<") else None


def _int_arg(a: dict[str, Any], name: str, call: Call, path: Path) -> int:
    v = a.get(name)
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise FormatError(f"{path}: line {call.line}: {call.func}() has no {name} (an integer >= 1) in its logged "
                          f"arguments, got {v!r:.40}: not a FlashInfer 0.6 API log this reader knows")
    return v


def _find_dump(path: Path, dump: str) -> Path | None:
    """A dump directory the log names: as named (absolute, or relative to the log's folder), else a folder of
    that name anywhere one level below the log's folder (the dump root moved with the log)."""
    named = Path(dump)
    candidates = [named] if named.is_absolute() else []
    candidates += [path.parent / named, path.parent / named.name]
    candidates += sorted(path.parent.glob(f"*/{named.name}"))
    return next((c for c in candidates if (c / "metadata.jsonl").is_file() or (c / "inputs.pt").is_file()
                 or (c / "inputs.safetensors").is_file()), None)


def _dump_values(folder: Path, names: tuple[str, ...]) -> dict[str, list[int]]:
    """The integer tensors of a plan() dump by parameter name (`arg_1` -> names[0], `kwarg_x` -> x)."""
    from traceinsight.ingest.tensor_files import read_safetensors, read_torch_save

    if (folder / "inputs.safetensors").is_file():
        raw = read_safetensors(folder / "inputs.safetensors")
    elif (folder / "inputs.pt").is_file():
        raw = read_torch_save(folder / "inputs.pt")
    else:
        return {}
    out: dict[str, list[int]] = {}
    for key, values in raw.items():
        if key.startswith("kwarg_"):
            out[key[len("kwarg_"):]] = values
        elif key.startswith("arg_") and key[4:].isdigit() and 1 <= int(key[4:]) <= len(names):
            out[names[int(key[4:]) - 1]] = values
    return out


def _indptr(values: list[int], b: int, what: str, where: str) -> list[int]:
    if len(values) != b + 1:
        raise FormatError(f"{where}: {what} has {len(values)} entries but the batch has {b} requests (needs {b + 1})")
    if any(y < x for x, y in zip(values, values[1:], strict=False)) or values[0] < 0:
        raise FormatError(f"{where}: {what} is not a non-decreasing list of offsets from 0")
    return [y - x for x, y in zip(values, values[1:], strict=False)]


def kv_lens_from(indptr: list[int], last_page_len: list[int], page_size: int, where: str,
                 names: tuple[str, str] = ("indptr", "last_page_len")) -> list[int]:
    """Every request's KV length as FlashInfer computes it (`get_seq_lens`): (pages - 1) * page_size +
    last_page_len, with pages - 1 clamped at 0."""
    b = len(last_page_len)
    pages = _indptr(indptr, b, names[0], where)
    for i, last in enumerate(last_page_len):
        if not 0 <= last <= page_size:
            raise FormatError(f"{where}: {names[1]}[{i}] = {last} is outside 0..{page_size} (the page size)")
    return [max(p - 1, 0) * page_size + last for p, last in zip(pages, last_page_len, strict=True)]


def _batch_size(a: dict[str, Any], kind: str) -> int | None:
    last = a.get("last_page_len" if kind == "decode" else "paged_kv_last_page_len")
    if isinstance(last, Tensor) and len(last.shape) == 1:
        return last.shape[0]
    indptr = a.get("indptr" if kind == "decode" else "paged_kv_indptr")
    if isinstance(indptr, Tensor) and len(indptr.shape) == 1 and indptr.shape[0] >= 2:
        return indptr.shape[0] - 1
    return None


def read(path: Path) -> Ingest:
    """Parse a FlashInfer API log into `batches` rows, one per plan() of a paged-KV wrapper."""
    calls, info = parse(path)
    if not calls:
        raise FormatError(f"{path}: a FlashInfer API log without any API call (FLASHINFER_LOGLEVEL was set, but "
                          "nothing was called after the logging started)")
    if not any(c.detailed for c in calls):
        raise FormatError(f"{path}: a FlashInfer API log at level 1 (function names only): plan() arguments are "
                          "not logged; capture with FLASHINFER_LOGLEVEL=3 (batch sizes and shapes) or 10 with "
                          "FLASHINFER_DUMP_INCLUDE='*.plan' (KV lengths too)")
    ingest = Ingest(format=FORMAT)
    cols = ingest.columns("batches", LOG_COLUMNS)
    versions = [("flashinfer", info.get("FlashInfer version")), ("torch", info.get("PyTorch version")),
                ("cuda", info.get("CUDA toolkit version"))]
    ingest.tool_version = ", ".join(f"{k} {v}" for k, v in versions if v) or None
    wrappers: dict[str, _Wrapper] = {}
    rows: list[dict[str, Any]] = []
    level = 3
    runs = 0
    missing: list[str] = []
    for call in calls:
        kind = _kind(call.cls)
        addr = call.wrapper
        if kind is None or addr is None:
            continue
        if call.method == "__init__":
            wrappers[addr] = _wrapper_from_init(call, kind)
        elif call.method == "run":
            w = wrappers.get(addr)
            if w is not None and w.plan_row is not None:
                rows[w.plan_row]["log_runs"].append(runs)
            runs += 1
        elif call.method == "plan":
            w = wrappers.get(addr) or _Wrapper(call.cls, None, None, None)
            wrappers[addr] = w
            try:
                row = _plan_row(path, call, kind, w, len(rows), missing)
            except FormatError:
                if call is not calls[-1]:
                    raise
                ingest.warnings.append(f"{path.name}: the log ends inside its last call ({call.func}, line "
                                       f"{call.line}: cut short?); that call is left out")
                continue
            if any(isinstance(v, Tensor) and v.stats for v in call.args.values()):
                level = max(level, 5)
            if call.dump is not None:
                level = 10
            w.plan_row = len(rows)
            rows.append(row)
    if not rows:
        raise FormatError(f"{path}: a FlashInfer API log without a plan() call of a paged-KV wrapper "
                          f"({DECODE_CLASS} or {PREFILL_CLASS}): no batch to attach")
    ingest.format_version = f"level {level}"
    with_lens = sum(1 for r in rows if r["kv_lens"] is not None)
    if with_lens < len(rows):
        why = (f"; {len(missing)} named dumps not found beside the log (first: {missing[0]})" if missing
               else " (logged below level 10: the KV lengths are in level 10's plan() dumps, "
               "FLASHINFER_LOGLEVEL=10 FLASHINFER_DUMP_INCLUDE='*.plan')")
        ingest.warnings.append(f"{path.name}: {len(rows) - with_lens} of {len(rows)} plan() calls without KV "
                               f"lengths{why}: their steps get the batch size and shape, not the planner's model")
    for row in rows:
        for name in LOG_COLUMNS:
            cols[name].append(row.get(name))
    return ingest


def _plan_row(path: Path, call: Call, kind: str, w: _Wrapper, index: int, missing: list[str]) -> dict[str, Any]:
    names = DECODE_PLAN if kind == "decode" else PREFILL_PLAN
    a = call.named(names)
    where = f"{path}: line {call.line}"
    page = _int_arg(a, "page_size", call, path)
    qo_heads = _int_arg(a, "num_qo_heads", call, path)
    kv_heads = _int_arg(a, "num_kv_heads", call, path)
    head_dim = _int_arg(a, "head_dim" if kind == "decode" else "head_dim_qk", call, path)
    b = _batch_size(a, kind)
    kv_lens: list[int] | None = None
    qo_lens: list[int] | None = [1] * b if kind == "decode" and b else None
    if call.dump is not None:
        folder = _find_dump(path, call.dump)
        if folder is None:
            missing.append(call.dump)
        else:
            values = _dump_values(folder, names)
            where = str(folder)
            kv_lens, qo_lens, b = _exact(values, kind, page, where, qo_lens, b)
    if b is None or b < 1:
        raise FormatError(f"{path}: line {call.line}: {call.func}() without a last_page_len tensor of at least one "
                          "request in its logged arguments")
    kv_dtype = _dtype_name(a.get("kv_data_type")) or _dtype_name(a.get("data_type")) or _dtype_name(
        a.get("q_data_type"))
    return {
        "step_key": f"{STEP_KEY_PREFIX} plan={index}",
        "batch_size": b,
        "kv_lens": kv_lens,
        "qo_heads": qo_heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "page_size": page,
        "kv_dtype": kv_dtype,
        "path": w.path if kind == "decode" else "tensor-core",
        "backend": w.backend,
        "cuda_graph": w.cuda_graph,
        "qo_lens": qo_lens,
        "log_call": index,
        "log_runs": [],
    }


def _exact(values: dict[str, list[int]], kind: str, page: int, where: str, qo_lens: list[int] | None,
           b: int | None) -> tuple[list[int] | None, list[int] | None, int | None]:
    """KV lengths (and query rows for a prefill wrapper) from a plan() dump's tensors."""
    if kind == "decode":
        last, indptr, seq = values.get("last_page_len"), values.get("indptr"), values.get("seq_lens")
        names = ("indptr", "last_page_len")
    else:
        last, indptr, seq = (values.get("paged_kv_last_page_len"), values.get("paged_kv_indptr"),
                             values.get("seq_lens"))
        names = ("paged_kv_indptr", "paged_kv_last_page_len")
    if seq is not None:
        kv = list(seq)
    elif last is not None and indptr is not None:
        kv = kv_lens_from(indptr, last, page, where, names)
    else:
        return None, qo_lens, b
    if b is not None and len(kv) != b:
        raise FormatError(f"{where}: the dump holds {len(kv)} requests but the log's tensors {b}")
    b = len(kv)
    if kind == "decode":
        qo_lens = [1] * b
    elif (qo := values.get("qo_indptr")) is not None:
        qo_lens = _indptr(qo, b, "qo_indptr", where)
        if any(q < 1 for q in qo_lens):
            qo_lens = None  # a request with no query rows: not a phase signal this reader trusts
    return kv, qo_lens, b

