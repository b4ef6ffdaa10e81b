"""The JSON document of an analysis: schema `traceinsight.analysis/1` (docs/JSON.md). Keys are stable once
released: add keys, never rename or remove them."""

from __future__ import annotations

from typing import Any

from traceinsight import __version__
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.model.steps import Launch, Step

SCHEMA = "traceinsight.analysis/1"
MULTI_SCHEMA = "traceinsight.analyses/1"


def _launch(launch: Launch) -> dict[str, Any]:
    k = launch.attention
    return {
        "kernel": k.kernel,
        "name": k.name,
        "family": k.family,
        "backend": k.backend,
        "phase": launch.phase,
        "phase_evidence": launch.phase_evidence,
        "params": k.params,
        "grid": list(k.grid),
        "block": list(k.block),
        "registers_per_thread": k.registers_per_thread,
        "smem_bytes": k.smem_bytes,
        "stream": k.stream_id,
        "start_ns": k.start_ns,
        "dur_ns": k.dur_ns,
        "split_kv": launch.split_kv,
        "split_evidence": launch.split_evidence,
        "merges": [{"kernel": m.kernel, "grid": list(m.grid), "dur_ns": m.dur_ns} for m in launch.merges],
        "prepares": [{"kernel": p.kernel, "grid": list(p.grid), "dur_ns": p.dur_ns} for p in launch.prepares],
    }


def _step(step: Step) -> dict[str, Any]:
    return {
        "index": step.index,
        "name": step.name,
        "source": step.source,
        "start_ns": step.start_ns,
        "dur_ns": step.dur_ns,
        "attention_ns": step.attention_ns,
        "kernel_count": len(step.kernels),
        "split_kv": step.split_kv,
        "launches": [_launch(x) for x in step.launches],
    }


def _finding(f: Any) -> Any:
    return f.to_json() if hasattr(f, "to_json") else f


def to_json(a: TraceAnalysis) -> dict[str, Any]:
    gpu = a.gpu
    return {
        "schema": SCHEMA,
        "tool": {"name": "traceinsight", "version": __version__},
        "trace": {
            "path": a.path,
            "format": a.format,
            "format_version": a.format_version,
            "tool_version": a.tool_version,
            "gpu": {
                "name": gpu.get("name"),
                "num_sms": gpu.get("num_sms"),
                "device_id": gpu.get("device_id"),
                "compute_capability": (
                    f"{gpu['compute_major']}.{gpu['compute_minor']}" if gpu.get("compute_major") is not None else None
                ),
            },
            "start_ns": a.start_ns,
            "end_ns": a.end_ns,
            "dur_ns": a.dur_ns,
            "warnings": a.warnings,
        },
        "families": a.families,
        "kernels": a.kernels,
        "steps": [_step(s) for s in a.steps],
        "findings": [_finding(f) for f in a.findings],
        **a.extra,
    }


def documents(analyses: list[TraceAnalysis]) -> dict[str, Any]:
    """One analysis: its document. Several: `{"schema": MULTI_SCHEMA, "traces": [document, ...]}`."""
    if len(analyses) == 1:
        return to_json(analyses[0])
    return {"schema": MULTI_SCHEMA, "traces": [to_json(a) for a in analyses]}
