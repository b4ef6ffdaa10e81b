"""Accuracy of the schedule model on the real H200 captures (shared/traces/h200), every number rerun.

For each backend in the sweeps (FlashInfer CUDA-core `tc=0`, FlashInfer SM90 `tc=1`, FlashInfer FA2), and for
FlashAttention-3 on our own captures (examples/fa3, through benchmarks/validate_fa3.py):
- planners: padded batch size and split_kv vs the planner's own plan_info, grid vs every traced launch;
- simulator: kernel time vs measured (median of the 3 steps' attention-kernel durations in the trace).
  The cost model is calibrated on the `uniform` and `two40` cases of the same trace, starting from a generic
  shape, and reported on the held-out `skew40`, `skew60`, `skew80` cases (errors on the calibration cases are
  printed too, marked 'cal');
- SM idle fraction vs Nsight Compute's 1 - avg/max of sm__cycles_active (flashinfer_decode.ncu.csv), with the
  batch composition taken from the sweep's meta for the same (tc, dist, B). No ncu case is used to calibrate.

    .venv/bin/python benchmarks/validate_model.py [--traces DIR]

Prints tables and writes benchmarks/results/validate_model.json.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import re
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from traceinsight.model import (
    GENERIC_SHAPE,
    Batch,
    CostModel,
    Plan,
    calibrate,
    gpu_for,
    occupancy,
    plan,
    simulate,
    threshold,
)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = REPO.parent / "shared" / "traces" / "h200"
RESULTS = REPO / "benchmarks" / "results" / "validate_model.json"
CAL_DISTS = ("uniform", "two40")
STEP = re.compile(r"tc=(\d)(?: backend=\w+)? dist=(\w+) bs=(\d+) step=(\d+)")
ATTENTION = ("BatchDecodeWithPagedKVCacheKernel", "PrefillWithKVCacheKernel", "BatchPrefillWithPagedKVCacheKernel")


def read_sweep(trace: Path) -> tuple[dict[str, Any], dict[tuple[int, str, int], list[dict[str, Any]]]]:
    """(deviceProperties[0], {(tc, dist, B): attention kernel events of its steps}) of a Kineto sweep."""
    doc = json.load(gzip.open(trace))
    events = doc["traceEvents"]
    ranges = sorted(
        (e for e in events if e.get("cat") == "gpu_user_annotation" and STEP.search(e["name"])),
        key=lambda e: e["ts"],
    )
    starts = [r["ts"] for r in ranges]
    out: dict[tuple[int, str, int], list[dict[str, Any]]] = defaultdict(list)
    for k in events:
        if k.get("cat") != "kernel" or not any(a in k["name"] for a in ATTENTION):
            continue
        # The step whose range contains the kernel (ranges do not overlap).
        lo, hi = 0, len(starts)
        while lo < hi:
            mid = (lo + hi) // 2
            if starts[mid] <= k["ts"]:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            continue
        r = ranges[lo - 1]
        if k["ts"] + k["dur"] <= r["ts"] + r["dur"]:
            m = STEP.search(r["name"])
            assert m is not None
            out[(int(m[1]), m[2], int(m[3]))].append(k)
    return doc["deviceProperties"][0], out


def read_ncu(path: Path) -> list[dict[str, Any]]:
    """Attention-kernel rows of an `ncu --csv --page raw --nvtx` export: case key, idle fraction, duration."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    nvtx_col = next(c for c in rows[0] if "Push/Pop_Range" in c)
    out = []
    for row in rows[1:]:  # rows[0] holds the units
        if "BatchDecodeWithPagedKVCacheKernel" not in row["Kernel Name"]:
            continue
        m = re.search(r"tc=(\d) dist=(\w+) bs=(\d+)", row[nvtx_col])
        assert m is not None

        def num(col: str, row: dict[str, str] = row) -> float:
            return float(row[col].replace(",", ""))

        avg, mx = num("sm__cycles_active.avg"), num("sm__cycles_active.max")
        out.append(
            {
                "key": (int(m[1]), m[2], int(m[3])),
                "idle": 1 - avg / mx,
                "duration_ns": num("gpu__time_duration.sum"),
                "grid": row["Grid Size"],
            }
        )
    return out


def evaluate(
    backend: str,
    cases: list[dict[str, Any]],
    meta: dict[str, Any],
    kernels: dict[Any, list[dict[str, Any]]],
    props: dict[str, Any],
    tc: int,
) -> dict[str, Any]:
    gpu = gpu_for(props["name"], props)
    first = kernels[(tc, cases[0]["dist"], cases[0]["B"])][0]["args"]
    threads = first["block"][0] * first["block"][1] * first["block"][2]
    occ = occupancy(gpu, first["registers per thread"], threads, first["shared memory"])
    th = threshold(backend, occ, gpu.num_sms, meta["KH"])
    plans: dict[tuple[str, int], Plan] = {}
    rows: list[dict[str, Any]] = []
    planner_mismatches = 0
    grid_mismatches = 0
    for c in cases:
        batch = Batch(c["kv_lens"], meta["PAGE"], meta["QH"], meta["KH"], meta["HD"])
        p = plan(backend, batch, gpu, occ)
        plans[(c["dist"], c["B"])] = p
        info = c["plan_info"]
        if len(info) in (10, 15):
            planner_mismatches += int(p.padded_batch_size != info[0] or int(p.split_kv) != info[-1])
        else:  # SM90: offsets only; qo_tile_indices take 4 bytes per work item
            planner_mismatches += int(4 * len(p.work_items) != info[1])
        steps = kernels[(tc, c["dist"], c["B"])]
        grid_mismatches += sum(tuple(k["args"]["grid"]) != p.grid for k in steps)
        measured = statistics.median(k["dur"] * 1000.0 for k in steps)
        rows.append({"dist": c["dist"], "B": c["B"], "split_kv": p.split_kv, "measured_ns": measured})
    cal = [(plans[(r["dist"], r["B"])], r["measured_ns"]) for r in rows if r["dist"] in CAL_DISTS]
    t0 = time.perf_counter()
    cost = calibrate(cal, gpu, occ, prior=GENERIC_SHAPE)
    fit_s = time.perf_counter() - t0
    for r in rows:
        res = simulate(plans[(r["dist"], r["B"])], gpu, occ, cost)
        r["predicted_ns"] = res.predicted_ns
        r["error"] = res.predicted_ns / r["measured_ns"] - 1
        r["sim_idle"] = res.sm_idle_fraction
        r["set"] = "cal" if r["dist"] in CAL_DISTS else "held-out"
    held = [abs(r["error"]) for r in rows if r["set"] == "held-out"]
    calerr = [abs(r["error"]) for r in rows if r["set"] == "cal"]
    return {
        "backend": backend,
        "gpu": gpu.name,
        "occupancy": occ,
        "threshold": {"max_grid": th.max_grid, "b_threshold": th.b_threshold},
        "cases": len(rows),
        "planner_mismatches": planner_mismatches,
        "launches_checked": sum(len(kernels[(tc, c["dist"], c["B"])]) for c in cases),
        "grid_mismatches": grid_mismatches,
        "cost_model": cost.__dict__,
        "calibration_seconds": round(fit_s, 2),
        "held_out_median_abs_error": statistics.median(held),
        "held_out_max_abs_error": max(held),
        "cal_median_abs_error": statistics.median(calerr),
        "cal_max_abs_error": max(calerr),
        "rows": rows,
        "_plans": plans,
        "_gpu": gpu,
        "_cost": cost,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    args = ap.parse_args()
    d = args.traces
    meta = json.load(gzip.open(d / "flashinfer_decode_sweep.meta.json.gz"))
    props, kernels = read_sweep(d / "flashinfer_decode_sweep.pt.trace.json.gz")
    fa2_meta = json.load(gzip.open(d / "flashinfer_fa2_decode_sweep.meta.json.gz"))
    fa2_props, fa2_kernels = read_sweep(d / "flashinfer_fa2_decode_sweep.pt.trace.json.gz")
    results = [
        evaluate("flashinfer-cuda-core", [c for c in meta["cases"] if c["tc"] == 0], meta, kernels, props, 0),
        evaluate("flashinfer-sm90", [c for c in meta["cases"] if c["tc"] == 1], meta, kernels, props, 1),
        evaluate("flashinfer-fa2", fa2_meta["cases"], fa2_meta, fa2_kernels, fa2_props, 1),
    ]
    for res in results:
        print(
            f"\n== {res['backend']} on {res['gpu']}: occ {res['occupancy']}, max_grid "
            f"{res['threshold']['max_grid']}, B_th {res['threshold']['b_threshold']}"
        )
        print(
            f"planner mismatches {res['planner_mismatches']}/{res['cases']} cases, grid mismatches "
            f"{res['grid_mismatches']}/{res['launches_checked']} launches"
        )
        c: CostModel = res["_cost"]
        print(
            f"cost model (calibrated on {'+'.join(CAL_DISTS)} in {res['calibration_seconds']} s): "
            f"cta {c.cta_rate * 1e3:.2f} tok/us, sm {c.sm_rate * 1e3:.2f} tok/us, gpu "
            f"{'-' if c.gpu_rate is None else f'{c.gpu_rate * 1e3:.0f} tok/us'}, overhead "
            f"{c.item_overhead_tokens:.0f} tok, launch {c.launch_ns / 1e3:.2f} us, sharpness {c.sharpness}"
        )
        print(f"{'dist':8} {'B':>4} {'split':>5} {'meas us':>9} {'pred us':>9} {'err':>7} {'idle':>5}  set")
        for r in res["rows"]:
            print(
                f"{r['dist']:8} {r['B']:4d} {int(r['split_kv']):5d} {r['measured_ns'] / 1e3:9.1f} "
                f"{r['predicted_ns'] / 1e3:9.1f} {r['error']:+7.1%} {r['sim_idle']:5.2f}  {r['set']}"
            )
        print(
            f"held-out (skew40/60/80): median |err| {res['held_out_median_abs_error']:.1%}, "
            f"max {res['held_out_max_abs_error']:.1%}; calibration cases: median "
            f"{res['cal_median_abs_error']:.1%}, max {res['cal_max_abs_error']:.1%}"
        )
    # Nsight Compute SM idle fraction (CUDA-core decode kernel).
    cc = results[0]
    ncu_rows = []
    for row in read_ncu(d / "flashinfer_decode.ncu.csv"):
        tc, dist, b = row["key"]
        p = cc["_plans"][(dist, b)]
        sim = simulate(p, cc["_gpu"], cc["occupancy"], cc["_cost"])
        ncu_rows.append(
            {
                "case": f"tc={tc} dist={dist} bs={b}",
                "ncu_idle": row["idle"],
                "sim_idle": sim.sm_idle_fraction,
                "abs_error": abs(sim.sm_idle_fraction - row["idle"]),
                "ncu_duration_ns": row["duration_ns"],
                "predicted_ns": sim.predicted_ns,
            }
        )
    mae = statistics.mean(r["abs_error"] for r in ncu_rows)
    print("\n== SM idle fraction vs Nsight Compute (1 - avg/max sm__cycles_active), CUDA-core decode")
    print(f"{'case':26} {'ncu':>6} {'sim':>6} {'|diff|':>6} {'ncu us':>8} {'pred us':>8}")
    for r in ncu_rows:
        print(
            f"{r['case']:26} {r['ncu_idle']:6.3f} {r['sim_idle']:6.3f} {r['abs_error']:6.3f} "
            f"{r['ncu_duration_ns'] / 1e3:8.1f} {r['predicted_ns'] / 1e3:8.1f}"
        )
    print(f"MAE {mae:.3f}")
    # FlashAttention-3 on our own captures (examples/fa3): benchmarks/validate_fa3.py, whose tables print too.
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import validate_fa3

    print("\n== FlashAttention-3 (examples/fa3, benchmarks/validate_fa3.py)")
    fa3_rows, fa3_samples, fa3_gpu = validate_fa3.per_trace()
    for r in fa3_rows:
        print(f"  {r['trace']:34} split state {r['split_state_matches']}/{r['launches']} (trace only "
              f"{r['split_state_matches_trace_only']}), kernel time |err| median {r['median_abs_error']:.1%}, "
              f"max {r['max_abs_error']:.1%}")
    fa3_idle = validate_fa3.sm_idle(fa3_gpu)
    print(f"  SM idle vs Nsight Compute: MAE {fa3_idle['mae']:.3f} over {len(fa3_idle['rows'])} launches")
    out = {
        "calibration_dists": list(CAL_DISTS),
        "backends": [{k: v for k, v in r.items() if not k.startswith("_")} for r in results],
        "ncu_idle": {"rows": ncu_rows, "mae": mae},
        "fa3": {"traces": fa3_rows, "default_cost": validate_fa3.default_shape(fa3_samples, fa3_gpu),
                "ncu_idle": fa3_idle},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1, default=str) + "\n")
    print(f"\nwrote {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
