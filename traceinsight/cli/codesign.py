"""`traceinsight codesign`: a model's attention shape against a GPU — arithmetic intensity of decode and
prefill, the roofline floor of a decode step, and the co-design checks (TP vs KV heads, head_dim, GQA group)."""

from __future__ import annotations

import sys

import click
import orjson

from traceinsight.cli.errors import user_errors
from traceinsight.cli.output import console
from traceinsight.errors import InputError

KV_DTYPES = ("bf16", "fp16", "fp8")


def _gpu_keys() -> list[str]:
    from traceinsight.model.gpus import known_gpus

    return [g.key for g in known_gpus()]


@click.command(name="codesign")
@click.option("--qo-heads", type=click.IntRange(min=1), required=True, help="Query heads of the model.")
@click.option("--kv-heads", type=click.IntRange(min=1), required=True, help="KV heads of the model.")
@click.option("--head-dim", type=click.IntRange(min=1), required=True, help="Elements per head.")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True, help="Tensor-parallel ranks.")
@click.option("--gpu", "gpu_key", default="h200", show_default=True, metavar="KEY",
              help="GPU table key (h200, h100-sxm, h100-pcie, h20, a100-80gb-sxm, l40s, b200, ...).")
@click.option("--kv-len", type=click.IntRange(min=1), default=None, help="KV length per request (tokens).")
@click.option("--batch", type=click.IntRange(min=1), default=None, help="Requests per decode step.")
@click.option("--layers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Attention layers per step (the roofline floor is per step of this many layers).")
@click.option("--kv-dtype", type=click.Choice(KV_DTYPES), default="bf16", show_default=True)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: the numbers as a document with schema traceinsight.codesign/1 (docs/JSON.md).")
@user_errors
def command(qo_heads: int, kv_heads: int, head_dim: int, tp: int, gpu_key: str, kv_len: int | None,
            batch: int | None, layers: int, kv_dtype: str, fmt: str) -> None:
    """Decode/prefill arithmetic intensity, the roofline floor per decode step (with --kv-len and --batch) and
    co-design checks with their reasons, for a model's attention shape on a GPU."""
    from traceinsight.diagnose.codesign import Shape, report
    from traceinsight.model.gpus import UnknownGPUError, gpu_by_key

    if qo_heads % kv_heads:
        raise InputError(f"--qo-heads {qo_heads} is not a multiple of --kv-heads {kv_heads}")
    try:
        gpu = gpu_by_key(gpu_key.lower())
    except UnknownGPUError:
        raise InputError(f"--gpu {gpu_key}: unknown GPU (known: {', '.join(_gpu_keys())})") from None
    shape = Shape(qo_heads, kv_heads, head_dim, tp, kv_dtype, "bf16")
    doc = report(shape, gpu.hbm_bandwidth_bytes_per_s, gpu.key, kv_len=kv_len, batch=batch, layers=layers)
    doc = {"schema": "traceinsight.codesign/1", "gpu": {"key": gpu.key, "name": gpu.name}, **doc}
    from traceinsight.cli.output import warn

    for c in doc["checks"]:
        if c["name"] == "kv-fits-memory" and not c["ok"]:
            warn(c["message"])
    if kv_len and batch and doc.get("memory") is None:
        warn(f"--gpu {gpu.key}: its memory size is not known, so the KV cache was not checked against it")
    if fmt == "json":
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.flush()
        return
    con = console()
    sh = doc["shape"]
    con.print(f"[bold]{qo_heads} query / {kv_heads} KV heads, head_dim {head_dim}, TP {tp}, KV {kv_dtype}[/bold] "
              f"on {gpu.name}")
    con.print(f"  per GPU: {sh['local_qo_heads']} query heads, {sh['local_kv_heads']} KV head(s), GQA group "
              f"{sh['local_group_size']:g} (model G = {sh['group_size']}); each KV head stored on "
              f"{sh['kv_replication']:g} GPU(s)")
    con.print(f"  KV bytes per token per GPU and layer: {doc['kv_bytes_per_token_per_gpu']:,}")
    ridge = doc["ridge_flop_per_byte"]
    con.print(f"  decode arithmetic intensity: {doc['decode_flop_per_byte_limit']:.3g} FLOP/byte for long KV"
              + (f", {doc['decode_flop_per_byte']:.3g} at KV length {kv_len:,}" if kv_len else "")
              + (f"; ridge point {ridge:.0f} FLOP/byte: memory-bound" if ridge else ""))
    if kv_len:
        con.print(f"  prefill of {kv_len:,} tokens: {doc['prefill_flop_per_byte']:.4g} FLOP/byte "
                  f"({doc['prefill_causal_flop_per_byte']:.4g} with a causal mask)"
                  + (f": {'compute' if doc['prefill_causal_flop_per_byte'] > ridge else 'memory'}-bound"
                     if ridge else ""))
    step = doc["step"]
    if step:
        floor = step["roofline_floor_ns"]
        bw = gpu.hbm_bandwidth_bytes_per_s  # known whenever the floor is
        con.print(f"  decode step, B = {batch} x {kv_len:,} tokens, {layers} layer(s): {step['kv_bytes_per_gpu']:,} "
                  "KV bytes per GPU; roofline floor "
                  + (f"{floor / 1e3:,.1f} us at {bw / 1e12:.2f} TB/s" if floor is not None and bw is not None
                     else "unknown (no bandwidth for this GPU)"))
    elif kv_len or batch:
        con.print("  (give both --kv-len and --batch for the roofline floor of a step)")
    con.print("[bold]checks[/bold]")
    for c in doc["checks"]:
        mark = "[green]ok[/green]  " if c["ok"] else ("[yellow]warn[/yellow]" if c["severity"] == "warning"
                                                      else "[cyan]info[/cyan]")
        con.print(f"  {mark} {c['message']}")
        if not c["ok"]:
            con.print(f"       {c['reason']}", style="dim")
