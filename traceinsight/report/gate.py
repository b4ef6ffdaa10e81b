"""The regression gate of `traceinsight diff`: steps and kernels of BEFORE and AFTER paired by kind
(report/pairing.py, labels/spelling.py), the change of each group's median and p90 with a bootstrap interval
(report/compare_stats.py), a verdict only where the interval clears the threshold, the cause where the analysis has
one, priced in ns per step. The samples (gate_samples.py), the groups (gate_steps.py, gate_kernels.py, with
gate_groups.py and gate_causes.py), the A/A calibration (gate_calibration.py) and the lines (gate_text.py) each in
their own module; this one assembles the `gate` section.

Groups:
- step groups: steps of one kind (name without numbers, phase, batch bucket, attention backend); the sample is each
  step's wall time. A kind found on one side only pairs with the other side's kind that differs only in its
  backend (a path change: tensor-core <-> CUDA-core), else it is listed as new / gone.
- kernel groups: attention launches of one kernel kind, phase and backend (from the steps' launches), and the
  executions of each merge / prepare / GEMM / MoE / communication kernel kind (from the trace's kernels, when the
  input is a trace); the sample is each execution's time.

A side given as an analysis JSON has no kernel samples beyond its steps' attention launches, and a JSON holding only
the steps that matter has no step samples: the gate then says what it could not compare (`notes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceinsight.report.compare_stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE, MIN_SAMPLES
from traceinsight.report.gate_calibration import largest
from traceinsight.report.gate_groups import METRICS, Thresholds
from traceinsight.report.gate_kernels import kernel_groups
from traceinsight.report.gate_samples import KernelSamples, attention_samples
from traceinsight.report.gate_steps import step_groups

# Kernel families compared from the trace's kernels (attention comes from the steps' launches).
SAMPLED_FAMILIES = ("merge", "prepare", "gemm", "moe", "communication")
METHOD = (f"percentile bootstrap ({BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}) of the relative change "
          f"of each quantile, {CONFIDENCE:.0%} interval; quantile = order statistic of rank ceil(q*n); fewer than "
          f"{MIN_SAMPLES} values on a side: no interval, no verdict")


def gate(before_doc: Mapping[str, Any], after_doc: Mapping[str, Any], before: KernelSamples | None,
         after: KernelSamples | None, th: Thresholds) -> dict[str, Any]:
    """The `gate` section of the diff: step groups, kernel groups, what regressed / improved, the noise floors,
    and what could not be compared."""
    notes = []
    for side, doc in (("before", before_doc), ("after", after_doc)):
        if doc.get("steps_included") == "selected":
            notes.append(f"{side} is an analysis JSON holding only the steps that matter: steps are not compared "
                         "(analyze --format json --steps all, or diff the trace or an analyze --save folder)")
    steps = [] if notes else step_groups(before_doc, after_doc, th)
    kb, ka = before if before is not None else KernelSamples(), after if after is not None else KernelSamples()
    if not notes:  # a document of the steps that matter holds a biased sample of launches
        attention_samples(before_doc, kb)
        attention_samples(after_doc, ka)
    if not (kb.from_trace and ka.from_trace):
        notes.append("GEMM, MoE, communication, merge and prepare kernels are compared only when both sides are "
                     "traces (an analysis JSON keeps the attention launches of its steps alone)")
        kb.durations = {k: v for k, v in kb.durations.items() if k[0] == "attention"}
        ka.durations = {k: v for k, v in ka.durations.items() if k[0] == "attention"}
    nb, na = len(before_doc.get("steps") or []), len(after_doc.get("steps") or [])
    kernels = kernel_groups(kb, ka, nb, na, before_doc, after_doc, th)
    regressed = [g["group"] for g in steps + kernels if g["verdict"] == "regressed"]
    improved = [g["group"] for g in steps + kernels if g["verdict"] == "improved"]
    floors = [(g["metrics"][m]["noise_floor"], g["group"], m) for g in steps + kernels if g["metrics"]
              for m in METRICS if g["metrics"][m]["noise_floor"] is not None]
    cal = th.calibration
    return {
        "method": METHOD,
        "thresholds": {m: th.of(m) for m in METRICS},
        "step_metric": th.step_metric,
        "calibration": None if cal is None else {
            "sources": list(cal.sources), "groups": len(cal.groups),
            "largest": {m: largest(cal, m) for m in METRICS}},
        "step_groups": steps,
        "kernel_groups": kernels,
        "regressed": regressed,
        "improved": improved,
        "noise_floor": {"min": min(floors)[0], "max": max(floors)[0], "max_group": max(floors)[1],
                        "max_metric": max(floors)[2]} if floors else None,
        "notes": notes,
    }
