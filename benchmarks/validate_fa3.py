"""Accuracy of the FlashAttention-3 model on our own H200 captures (examples/fa3), every number rerun.

- Split state: per launch, what the analysis says (split-KV on = at least one request cut) against what FA3's
  scheduler metadata recorded in the sidecar (`plan.splits`), on every committed FA3 trace; and from the trace
  alone (no sidecar), where only the combine and prepare kernels tell.
- Kernel time: the analysis' predicted time (planner + simulator, cost model calibrated by `analyze` on each
  trace's own balanced launches) against the measured main-kernel duration, per trace.
- The default FA3 cost shape (`model.calibration.H200_COSTS['fa3']`): `calibrate()` on the sweeps' uniform and
  skew40 launches of both shapes, from a generic shape, reported on everything else (skew80, the call variants,
  the serving replay) — this is where the constants in calibration.py come from.
- SM idle: simulated 1 - mean/max SM busy against Nsight Compute's 1 - avg/max sm__cycles_active of the main
  kernel (the three ncu CSVs), the batch from each ncu row's NVTX range matched to its sidecar step.

    .venv/bin/python benchmarks/validate_fa3.py

Prints tables and writes benchmarks/results/validate_fa3.json.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from traceinsight.ingest import load
from traceinsight.ingest.sidecar import key_matches
from traceinsight.model import GENERIC_SHAPE, calibrate, simulate
from traceinsight.model.batches import batch_from_sidecar, fa3_options, planner_batch, sidecar_rows
from traceinsight.model.calibration import shape_of
from traceinsight.model.planners import plan
from traceinsight.pipeline import analyze

REPO = Path(__file__).resolve().parents[1]
FA3 = REPO / "examples" / "fa3"
RESULTS = REPO / "benchmarks" / "results" / "validate_fa3.json"
TRACES = ("sweep_q32kv4d128_fa3_torch", "sweep_q64kv8d128_fa3_torch", "variants_q32kv4d128_fa3_torch",
          "variants_q64kv8d128_fa3_torch", "serving_q64kv8d128_fa3_torch")
NCU = ("sweep_q32kv4d128_fa3_ncu", "sweep_q64kv8d128_fa3_ncu", "ncu_variants_q32kv4d128_fa3_ncu")
CAL_DISTS = ("dist=uniform", "dist=skew40")


def _trace(name: str) -> Path:
    return next(p for p in FA3.glob(f"{name}.*") if ".sidecar." not in p.name)


def per_trace() -> tuple[list[dict[str, Any]], list[tuple[Any, float, str, str]], Any]:
    rows = []
    samples: list[tuple[Any, float, str, str]] = []
    gpu = None
    for name in TRACES:
        path = _trace(name)
        _, (a,) = analyze([path], meta=[FA3 / f"{name}.sidecar.json.gz"], cache=False, diagnostics=False)
        _, (bare,) = analyze([path], cache=False, diagnostics=False)
        gpu = a.schedule.gpu
        same = errs = 0
        bare_same = 0
        n = 0
        rel: list[float] = []
        bare_split = {x.attention.kernel_id: x.split_kv for s in bare.steps for x in s.launches}
        for st in a.steps:
            b = a.schedule.batches[st.index]
            truth = any(v > 1 for v in b.planned_splits or ())
            for x in st.launches:
                n += 1
                same += x.split_kv is truth
                bare_same += bare_split.get(x.attention.kernel_id) is truth
                m = a.schedule.models.get(x.attention.kernel_id)
                if m is not None and m.predicted_ns:
                    rel.append(m.predicted_ns / x.attention.dur_ns - 1)
                    if m.plan is not None:
                        samples.append((m.plan, x.attention.dur_ns, name, st.name))
        errs = len(rel)
        abs_rel = sorted(abs(e) for e in rel)
        rows.append({"trace": name, "launches": n, "split_state_matches": same,
                     "split_state_matches_trace_only": bare_same, "predicted": errs,
                     "median_abs_error": statistics.median(abs_rel), "max_abs_error": abs_rel[-1]})
    return rows, samples, gpu


def default_shape(samples: list[tuple[Any, float, str, str]], gpu: Any) -> dict[str, Any]:
    cal = [(p, d) for p, d, n, s in samples if n.startswith("sweep") and any(t in s for t in CAL_DISTS)]
    cost = calibrate(cal, gpu, 1, prior=GENERIC_SHAPE)
    held: dict[str, list[float]] = {}
    for p, d, n, s in samples:
        if n.startswith("sweep") and any(t in s for t in CAL_DISTS):
            continue
        held.setdefault(n, []).append(abs(simulate(p, gpu, 1, cost).predicted_ns / d - 1))
    return {"cost_model": cost.__dict__, "shape": shape_of(cost, gpu.num_sms).__dict__,
            "calibration_launches": len(cal),
            "held_out": {n: {"launches": len(v), "median_abs_error": statistics.median(v), "max_abs_error": max(v)}
                         for n, v in held.items()}}


def sm_idle(gpu: Any) -> dict[str, Any]:
    """Simulated SM idle vs ncu for every main kernel of the ncu CSVs; the cost model calibrated on the sweep
    trace of the same shape (as `analyze` does on a trace)."""
    rows = []
    costs: dict[str, Any] = {}
    for shape in ("q32kv4d128", "q64kv8d128"):
        name = f"sweep_{shape}_fa3_torch"
        _, (a,) = analyze([_trace(name)], meta=[FA3 / f"{name}.sidecar.json.gz"], cache=False, diagnostics=False)
        costs[shape] = next(iter(a.schedule.costs.values()))
    for name in NCU:
        db, (tid,) = load([FA3 / f"{name}.ncu.csv"], meta=[FA3 / f"{name}.sidecar.json.gz"], cache=False)
        side = sidecar_rows(db, tid)
        kernels = db.rows("SELECT k.ncu_id, k.name, k.nvtx, m.metric, m.value FROM ncu_kernels k JOIN ncu_metrics m "
                          "USING (trace_id, ncu_id) WHERE k.trace_id = $t AND k.name LIKE '%FlashAttnFwdSm90%' AND "
                          "m.metric IN ('sm__cycles_active.avg', 'sm__cycles_active.max', 'gpu__time_duration.sum')",
                          {"t": tid})
        by: dict[int, dict[str, Any]] = {}
        for r in kernels:
            by.setdefault(r["ncu_id"], {"name": r["name"], "nvtx": r["nvtx"]})[r["metric"]] = r["value"]
        shape = "q32kv4d128" if "q32kv4" in name else "q64kv8d128"
        for k in by.values():
            row = next((s for s in side if key_matches(s["step_key"], k["nvtx"] or "")), None)
            if row is None:
                continue
            from traceinsight.labels import label
            from traceinsight.model.kernel_columns import kernel
            from traceinsight.model.steps import Launch
            lab = label(k["name"])
            kern = kernel(0, k["name"], lab.kernel, lab.family, lab.backend, lab.phase, "", lab.params, None, None,
                          0, 0, 0, (gpu.num_sms, 1, 1), (384, 1, 1), None, None)
            sb = batch_from_sidecar(row, Launch(kern), None)
            p = plan("fa3", planner_batch(sb), gpu, 1, **fa3_options(kern, sb))
            sim = simulate(p, gpu, 1, costs[shape])
            idle = 1 - k["sm__cycles_active.avg"] / k["sm__cycles_active.max"]
            rows.append({"case": f"{name}: {k['nvtx']}", "ncu_idle": round(idle, 4),
                         "sim_idle": round(sim.sm_idle_fraction, 4), "abs_error": abs(sim.sm_idle_fraction - idle),
                         "ncu_duration_ns": k["gpu__time_duration.sum"], "predicted_ns": sim.predicted_ns})
    return {"rows": rows, "mae": statistics.mean(r["abs_error"] for r in rows) if rows else None}


def main() -> None:
    rows, samples, gpu = per_trace()
    print(f"{'trace':34} {'launches':>8} {'split ok':>8} {'trace-only':>10} {'|err| med':>9} {'max':>7}")
    for r in rows:
        print(f"{r['trace']:34} {r['launches']:8d} {r['split_state_matches']:8d} "
              f"{r['split_state_matches_trace_only']:10d} {r['median_abs_error']:9.1%} {r['max_abs_error']:7.1%}")
    shape = default_shape(samples, gpu)
    print(f"\ndefault FA3 cost (calibrated on the sweeps' uniform + skew40, {shape['calibration_launches']} launches): "
          f"{shape['cost_model']}")
    for n, v in shape["held_out"].items():
        print(f"  held out {n:34} {v['launches']:4d} launches: median |err| {v['median_abs_error']:.1%}, "
              f"max {v['max_abs_error']:.1%}")
    idle = sm_idle(gpu)
    print(f"\nSM idle vs Nsight Compute ({len(idle['rows'])} main-kernel launches): MAE {idle['mae']:.3f}")
    for r in idle["rows"]:
        print(f"  {r['case'][:90]:90} ncu {r['ncu_idle']:.3f} sim {r['sim_idle']:.3f}")
    out = {"traces": rows, "default_cost": shape, "ncu_idle": idle}
    RESULTS.write_text(json.dumps(out, indent=1, default=str) + "\n")
    print(f"\nwrote {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
