"""The JSON document of an analysis: schema `traceinsight.analysis/1` (docs/JSON.md). Keys are stable once
released: add keys, never rename or remove them."""

from __future__ import annotations

from typing import Any

from traceinsight import __version__
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.model.attach import Schedule
from traceinsight.model.steps import Launch, Step

SCHEMA = "traceinsight.analysis/1"
MULTI_SCHEMA = "traceinsight.analyses/1"


def _launch(launch: Launch, sched: Schedule | None = None) -> dict[str, Any]:
    k = launch.attention
    out = {
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
        "tiles": launch.tiles,
    }
    if sched is not None:
        model = sched.models.get(k.kernel_id)
        if model is not None:
            out["model"] = model.to_json()
        measured = sched.measured.get(k.kernel_id)
        if measured is not None:
            out["measured"] = measured.to_json()
    return out


def _step(step: Step, sched: Schedule | None = None) -> dict[str, Any]:
    out = {
        "index": step.index,
        "name": step.name,
        "source": step.source,
        "start_ns": step.start_ns,
        "dur_ns": step.dur_ns,
        "attention_ns": step.attention_ns,
        "kernel_count": step.kernel_count,
        "split_kv": step.split_kv,
        "phase": step.phase,
        "wall_ns": step.wall_ns,
        "breakdown": step.breakdown.to_json() if step.breakdown is not None else None,
        "launches": [_launch(x, sched) for x in step.launches],
    }
    batch = sched.batches.get(step.index) if sched is not None else None
    if batch is not None:
        out["batch"] = batch.to_json()
    return out


def _finding(f: Any) -> Any:
    return f.to_json() if hasattr(f, "to_json") else f


def to_json(a: TraceAnalysis) -> dict[str, Any]:
    gpu = a.gpu
    sched = a.schedule
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
        "thresholds": [t.to_json() for t in sched.thresholds.values()] if sched is not None else [],
        "steps": [_step(s, sched) for s in a.steps],
        "findings": [_finding(f) for f in a.findings],
        "checks": [c.to_json() if hasattr(c, "to_json") else c for c in a.checks],
        "model": _schedule(sched),
        **a.extra,
    }


def _schedule(sched: Schedule | None) -> dict[str, Any] | None:
    """Facts about the schedule model as a whole: the GPU model, calibrated costs, notes."""
    if sched is None:
        return None
    gpu = sched.gpu
    return {
        "gpu": None if gpu is None else {
            "key": gpu.key, "name": gpu.name, "num_sms": gpu.num_sms,
            "hbm_bandwidth_bytes_per_s": gpu.hbm_bandwidth_bytes_per_s,
        },
        "cost_models": [
            {"name": name, "kernel": sched.thresholds[name].kernel if name in sched.thresholds else None,
             "cta_rate_tokens_per_ns": c.cta_rate, "sm_rate_tokens_per_ns": c.sm_rate,
             "gpu_rate_tokens_per_ns": c.gpu_rate, "item_overhead_tokens": c.item_overhead_tokens,
             "launch_ns": c.launch_ns, "sharpness": None if c.sharpness == float("inf") else c.sharpness}
            for name, c in sched.costs.items()
        ],
        "idle_gaps": len(sched.idle_gaps),
        "idle_gap_ns": sum(g.dur_ns for g in sched.idle_gaps),
        "notes": list(sched.notes),
    }


def documents(analyses: list[TraceAnalysis]) -> dict[str, Any]:
    """One analysis: its document. Several: `{"schema": MULTI_SCHEMA, "traces": [document, ...], "fleet":
    {"summary": [one row per trace], "findings": [findings across traces]}}`."""
    if len(analyses) == 1:
        return to_json(analyses[0])
    from traceinsight.report.fleet import fleet_findings, fleet_summary

    rows = fleet_summary(analyses)
    return {"schema": MULTI_SCHEMA, "traces": [to_json(a) for a in analyses],
            "fleet": {"summary": rows, "findings": fleet_findings(rows)}}
