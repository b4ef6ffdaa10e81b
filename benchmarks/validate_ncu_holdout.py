"""Simulated SM idle fraction vs Nsight Compute on cases never used to build or tune the model.

The cases: examples/collected/ncu_holdout.ncu.csv (20 CUDA-core decode launches: B in {64, 192, 288, 296, 320} x
{uniform, skew40, skew80, two40}, shape H_q 32 / H_kv 4 / D 128, collected on an H200 after the model was
written) and examples/collected/sweep_q64kv8d128_ncu.ncu.csv (CUDA-core and FA2 launches of a second shape,
H_q 64 / H_kv 8). Each launch's batch composition comes from its sidecar (matched by the NVTX range name).
The model runs with its default H200 costs (`default_cost`, fitted on the shared sweep's uniform/two40 cases);
nothing here is fitted. Measured idle = 1 - avg/max of sm__cycles_active.

    .venv/bin/python benchmarks/validate_ncu_holdout.py

Prints one row per launch and the mean absolute error; writes benchmarks/results/validate_ncu_holdout.json.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

from traceinsight.model import Batch, default_cost, gpu_for, occupancy, plan, simulate

REPO = Path(__file__).resolve().parents[1]
COLLECTED = REPO / "examples" / "collected"
CASES = [("ncu_holdout.ncu.csv", "ncu_holdout.sidecar.json"),
         ("sweep_q64kv8d128_ncu.ncu.csv", "sweep_q64kv8d128_ncu.sidecar.json")]
BACKEND_OF_KERNEL = {"BatchDecodeWithPagedKVCacheKernel": "flashinfer-cuda-core",
                     "BatchPrefillWithPagedKVCacheKernel": "flashinfer-fa2"}


def ncu_rows(path: Path) -> list[dict[str, str]]:
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    return rows[1:]  # rows[0] holds the units


def num(cell: str) -> float:
    return float(cell.replace(",", ""))


def main() -> None:
    gpu = gpu_for("NVIDIA H200")
    out = []
    for csv_name, sidecar_name in CASES:
        side = json.loads((COLLECTED / sidecar_name).read_text())
        shape = side["model"]
        steps = side["steps"]
        rows = ncu_rows(COLLECTED / csv_name)
        nvtx_col = next(c for c in rows[0] if "Push/Pop_Range" in c)
        for row in rows:
            kernel = next((k for k in BACKEND_OF_KERNEL if k in row["Kernel Name"]), None)
            if kernel is None:
                continue
            name = row[nvtx_col]
            match = [s for s in steps if set(s["key"].split()) <= set(name.replace(":", " ").split())]
            if len(match) != 1:
                continue
            step = match[0]
            backend = BACKEND_OF_KERNEL[kernel]
            batch = Batch(step["kv_lens"], shape["page_size"], shape["qo_heads"], shape["kv_heads"],
                          shape["head_dim"])
            block = [int(x) for x in row["Block Size"].strip("()").split(",")]
            occ = occupancy(gpu, int(num(row["launch__registers_per_thread"])), block[0] * block[1] * block[2],
                            int(num(row["launch__shared_mem_per_block"])) if row.get(
                                "launch__shared_mem_per_block") else 0)
            p = plan(backend, batch, gpu, occ)
            res = simulate(p, gpu, occ, default_cost(backend, gpu), detail=False)
            avg, mx = num(row["sm__cycles_active.avg"]), num(row["sm__cycles_active.max"])
            out.append({"file": csv_name, "step": step["key"], "backend": backend, "occupancy": occ,
                        "measured_idle": 1 - avg / mx, "simulated_idle": res.sm_idle_fraction,
                        "measured_ns": num(row["gpu__time_duration.sum"]), "predicted_ns": res.predicted_ns})
    print(f"{'step':48} {'backend':22} {'ncu idle':>8} {'sim idle':>8} {'ncu ms':>8} {'sim ms':>8}")
    for r in out:
        print(f"{r['step']:48} {r['backend']:22} {r['measured_idle']:8.3f} {r['simulated_idle']:8.3f} "
              f"{r['measured_ns'] / 1e6:8.3f} {r['predicted_ns'] / 1e6:8.3f}")
    errs = [abs(r["measured_idle"] - r["simulated_idle"]) for r in out]
    terr = [abs(r["predicted_ns"] / r["measured_ns"] - 1) for r in out]
    summary = {"launches": len(out), "idle_mae": statistics.mean(errs), "idle_max_abs_error": max(errs),
               "time_median_abs_rel_error": statistics.median(terr), "time_max_abs_rel_error": max(terr)}
    print(json.dumps(summary, indent=2))
    dest = REPO / "benchmarks" / "results" / "validate_ncu_holdout.json"
    dest.write_text(json.dumps({"summary": summary, "rows": out}, indent=2) + "\n")


if __name__ == "__main__":
    main()
