"""The report's notes, read from the JSON document: what a section needs when it has no data (`missing`), how
every number was obtained (`methods`), and what the diagnostics checked (`checks`)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from traceinsight.report.kernel_tables import model_coverage
from traceinsight.report.sweep_view import sweep


def missing(doc: dict[str, Any], what: str) -> str | None:
    """None when the section `what` has data; else the sentence saying what it needs."""
    if what == "findings" and not doc.get("findings"):
        if doc.get("checks"):
            return f"no findings: the {len(doc['checks'])} checks that ran found nothing to report"
        return "no findings (or not available: needs the diagnostics stage, traceinsight.diagnose)"
    if what == "thresholds" and not doc.get("thresholds"):
        return ("not available: needs the schedule model's occupancy and planner for an attention kernel the model "
                "knows, with registers/block/shared memory in the trace")
    if what == "steps" and not doc.get("steps"):
        return "not available: needs attention kernels in the trace (none were recognised)"
    if what == "sweep" and not sweep(doc):
        return ("not available: needs a sweep, i.e. steps named with `dist=… bs=…` tokens "
                "(e.g. `decode dist=skew80 bs=384`)")
    if what == "model" and not any(k != "launches" for k in model_coverage(doc)):
        return ("not available: needs the schedule model and a batch composition (a sidecar via --meta, or one "
                "bounded from the trace)")
    return None


def methods(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """How every number in the report was obtained: (topic, explanation) pairs, with this trace's specifics."""
    tr = doc.get("trace") or {}
    gpu = tr.get("gpu") or {}
    steps = doc.get("steps") or []
    sources: dict[str, int] = defaultdict(int)
    for s in steps:
        sources[s.get("source", "?").split(":")[0]] += 1
    cov = model_coverage(doc)
    modelled = {k: v for k, v in cov.items() if k != "launches"}
    out = [
        ("Trace", f"{tr.get('path')} read as {tr.get('format')}"
         + (f" {tr.get('format_version')}" if tr.get("format_version") else "")
         + (f" ({tr.get('tool_version')})" if tr.get("tool_version") else "")
         + ". Every time is a GPU timestamp from the profiler, converted to integer nanoseconds; nothing is "
           "sampled or estimated at ingest."),
        ("GPU", f"{gpu.get('name') or 'unknown'}, {gpu.get('num_sms') or '?'} SMs, compute capability "
         f"{gpu.get('compute_capability') or '?'}: from the trace's device properties where present, else the "
         "built-in GPU table."),
        ("Kernel labels", "Each kernel name is matched against the ordered label rules (first match wins): family, "
         "backend, phase and template parameters come from the name; a launch's phase may be corrected by its step "
         "(a prefill-named kernel with one query row per request is decode). Time and share are sums over the "
         "kernel's executions; share is of all GPU kernel time."),
        ("Steps", f"{len(steps)} steps: "
         + (", ".join(f"{n} from {'annotation ranges' if k == 'range' else 'single launches'}"
                      for k, n in sorted(sources.items())) or "none")
         + ". A step is the outermost annotation/NVTX range around attention launches (whole-run wrappers "
           "ignored), else one attention launch with its merge/prepare kernels. Step time = first kernel start "
           "to last kernel end; attention time = attention + merge + prepare kernels."),
        ("Split-KV", "From the trace alone: on when a merge/combine kernel follows the attention launch on the same "
         "stream within the step; off when none does (for backends that split through a merge) or the backend never "
         "splits (FlashInfer SM90); unknown otherwise. With a sidecar, the planner model's decision is shown too."),
        ("Thresholds", "Resident CTAs per SM (occupancy) from registers/thread, threads/block and shared memory "
         "against the SM's limits; max_grid = occupancy × SMs (FlashInfer FA2: 2 × SMs); B_th = the smallest batch "
         "with B × H_kv ≥ max_grid, where the planner stops splitting KV."
         + ("" if doc.get("thresholds") else " (Not computed for this trace.)")),
        ("Schedule model", "Work items (request, KV chunk) from the backend's planner replayed on the batch "
         "composition; CTAs dispatched greedily onto SMs × occupancy slots (persistent kernels: longest first); per-"
         "CTA cost calibrated on this trace's balanced launches, with the speed-up of a CTA running alone on an SM "
         "modelled. Predicted time = makespan; SM idle = 1 − Σ busy / (SMs × makespan); tail = time with fewer than "
         "half the SMs busy. "
         + (f"Modelled launches: {', '.join(f'{v} from {k}' for k, v in sorted(modelled.items()))} of "
            f"{cov.get('launches', 0)}." if modelled else "No launch was modelled for this trace.")
         + _cost_models(doc)),
        ("Batch compositions", _batch_sources(doc)),
        ("Findings and savings", "Each finding comes from one diagnostic rule (its id); the saving is that rule's "
         "estimate of the time the remedy would save over the steps it lists (e.g. measured time minus the "
         "predicted time with split-KV kept on). Spikes: step time against a linear-in-KV-tokens baseline when token "
         "counts are known, else a robust rolling median; each spike is linked to the finding covering that step."),
        ("Sweep figure", "Steps named with `dist=… bs=…` tokens grouped by the other tokens; each point is the "
         "median attention time over the repeated steps of a case. The vertical line is B_th of the panel's "
         "attention kernel."),
    ]
    return out


def _batch_sources(doc: dict[str, Any]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for st in doc.get("steps") or []:
        b = st.get("batch")
        counts[(b or {}).get("source") or "none"] += 1
    words = {"sidecar": "exact, from the sidecar (every request's KV length)",
             "trace": "bounded from the trace (grid, merge kernel, duration)", "none": "unknown"}
    parts = [f"{n} steps {words.get(k, k)}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    return ("; ".join(parts) or "no steps") + ". A sidecar step is matched to a step by its annotation name."


def _cost_models(doc: dict[str, Any]) -> str:
    model = doc.get("model") or {}
    costs = model.get("cost_models") or []
    text = ""
    if costs:
        text += " Cost models calibrated on this trace: " + "; ".join(
            f"{c.get('kernel') or (c.get('name') or '?')[:40]}: lone CTA {c.get('cta_rate_tokens_per_ns', 0):.3g}, "
            f"full SM {c.get('sm_rate_tokens_per_ns', 0):.3g} KV tokens/ns" for c in costs) + "."
    notes = model.get("notes") or []
    if notes:
        more = f" (+{len(notes) - 3} more)" if len(notes) > 3 else ""
        text += " Not modelled: " + "; ".join(notes[:3]) + more + "."
    return text


def checks(doc: dict[str, Any]) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """What the diagnostics checked: counts by status ('fired', 'passed', 'not-applicable'), and the rows
    (id, name, status, reason) with the ones that did not fire first."""
    rows = [c for c in doc.get("checks") or [] if isinstance(c, dict)]
    counts: dict[str, int] = defaultdict(int)
    for c in rows:
        counts[c.get("status") or "?"] += 1
    order = {"passed": 0, "not-applicable": 1, "fired": 2}
    return dict(counts), sorted(rows, key=lambda c: (order.get(c.get("status") or "", 3), c.get("id") or ""))


def checks_line(doc: dict[str, Any]) -> str | None:
    """'12 rules checked: 3 fired, 5 passed, 4 not applicable' (None when the diagnostics did not run)."""
    counts, rows = checks(doc)
    if not rows:
        return None
    parts = [f"{counts[k]} {k.replace('-', ' ')}" for k in ("fired", "passed", "not-applicable") if counts.get(k)]
    return f"{len(rows)} rules checked: " + ", ".join(parts)
