"""How long the schedule model takes on the real H200 sweeps, stage by stage, and what it adds to `analyze`.

Per backend (FlashInfer CUDA-core and SM90 from flashinfer_decode_sweep, FA2 from flashinfer_fa2_decode_sweep),
over every case of the sweep's meta: plan (fresh, no cache), simulate with segments and tail items (detail=True,
the H200 default cost), simulate without them (detail=False), and calibrate on the uniform + two40 cases against
the measured kernel times from a generic shape (as benchmarks/validate_model.py does). Then `traceinsight analyze`
of the sweep trace (examples/h200) with and without --meta, end to end in a fresh process: the difference is the
schedule model's share.

--baseline DIR measures another copy of the package (DIR holds a `traceinsight` folder, e.g. a snapshot taken
before a change: `mkdir /tmp/base && git archive HEAD traceinsight | tar -x -C /tmp/base`) in the same session,
each measurement in its own process, the two interleaved so that load on the machine hits both alike; compare the
ratios, not the seconds, across runs. Model stages are timed in CPU seconds of the worker process
(time.process_time: less sensitive to other load than wall time); analyze runs in wall and CPU seconds.

    .venv/bin/python benchmarks/model_speed.py [--runs 3] [--baseline DIR] [--no-analyze]

Prints a table and writes benchmarks/results/model_speed.json.

--traces times the model stage itself (`model.attach`: batches, planning, calibration, simulation of every launch)
inside `analyze` of the real serving / replay traces the golden tests hold (tests/golden.py) and FA3's serving
replay: per trace, wall and CPU seconds of that stage, each (source, run) one worker process that analyzes every
trace in turn (cache off), the sources interleaved run by run; medians, and baseline / current. The load average is
recorded with every run (the machine is shared).

    .venv/bin/python benchmarks/model_speed.py --traces [--cases a,b] [--runs 3] [--baseline DIR] [--out FILE]

writes benchmarks/results/model_speed_traces.json.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces" / "h200"
EXAMPLE = REPO / "examples" / "h200"
RESULTS = REPO / "benchmarks" / "results" / "model_speed.json"
STAGES = ("plan", "simulate", "simulate_light", "calibrate")
# (backend, trace, meta, tc) measured per worker.
SWEEPS = (
    ("flashinfer-cuda-core", "flashinfer_decode_sweep.pt.trace.json.gz", "flashinfer_decode_sweep.meta.json.gz", 0),
    ("flashinfer-sm90", "flashinfer_decode_sweep.pt.trace.json.gz", "flashinfer_decode_sweep.meta.json.gz", 1),
    ("flashinfer-fa2", "flashinfer_fa2_decode_sweep.pt.trace.json.gz", "flashinfer_fa2_decode_sweep.meta.json.gz", 1),
)


def worker() -> dict[str, dict[str, float]]:
    """Seconds per (backend, stage) for the `traceinsight` importable in this process."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from validate_model import CAL_DISTS, read_sweep  # the trace parsing validate_model does (not timed)

    from traceinsight.model import GENERIC_SHAPE, Batch, calibrate, default_cost, gpu_for, occupancy, plan, simulate

    out: dict[str, dict[str, float]] = {}
    sweeps: dict[str, Any] = {}
    for backend, trace, meta_name, tc in SWEEPS:
        if trace not in sweeps:
            sweeps[trace] = read_sweep(TRACES / trace)
        props, kernels = sweeps[trace]
        meta = json.load(gzip.open(TRACES / meta_name))
        cases = [c for c in meta["cases"] if c["tc"] == tc]
        gpu = gpu_for(props["name"], props)
        args = kernels[(tc, cases[0]["dist"], cases[0]["B"])][0]["args"]
        occ = occupancy(gpu, args["registers per thread"], args["block"][0] * args["block"][1] * args["block"][2],
                        args["shared memory"])
        batches = [Batch(c["kv_lens"], meta["PAGE"], meta["QH"], meta["KH"], meta["HD"]) for c in cases]
        cost = default_cost(backend, gpu)
        times: dict[str, float] = {}
        gc.collect()  # each stage starts from a clean collector: no stage pays for garbage of the one before
        t0 = time.process_time()
        plans = [plan(backend, b, gpu, occ) for b in batches]
        times["plan"] = time.process_time() - t0
        for stage, detail in (("simulate", True), ("simulate_light", False)):
            gc.collect()
            t0 = time.process_time()
            for p in plans:
                simulate(p, gpu, occ, cost, detail=detail)
            times[stage] = time.process_time() - t0
        cal = [(p, statistics.median(k["dur"] * 1000.0 for k in kernels[(tc, c["dist"], c["B"])]))
               for p, c in zip(plans, cases, strict=True) if c["dist"] in CAL_DISTS]
        gc.collect()
        t0 = time.process_time()
        calibrate(cal, gpu, occ, prior=GENERIC_SHAPE)
        times["calibrate"] = time.process_time() - t0
        times["items"] = float(sum(len(p.work_items) for p in plans))
        out[backend] = times
    return out


# The real traces the model stage is timed on (tests/golden.py names; 'fa3_serving' is FA3's serving replay, held by
# tests/test_fa3_model.py rather than a golden).
TRACE_CASES = ("collected_serving_q64kv8d128_torch", "collected_serving_q64kv8d128_graph_torch",
               "collected_serving_graph_nsys", "loop_core_torch", "loop_core_graph_torch", "loop_core_graph_nsys",
               "loop_fa2_torch", "loop_fa2_nsys", "collected_sweep_q64kv8d128_torch", "fa3_serving")
TRACES_RESULTS = REPO / "benchmarks" / "results" / "model_speed_traces.json"


def trace_worker(names: list[str]) -> dict[str, dict[str, float]]:
    """Per trace: wall and CPU seconds of the model stage (pipeline.attach) in `analyze`, for the `traceinsight`
    importable in this process; and the whole analysis's wall seconds."""
    sys.path.insert(0, str(REPO / "tests"))
    from golden import CASES  # type: ignore[import-not-found]

    import traceinsight.pipeline as pipeline

    try:  # the process tuned as the command's entry tunes it (older refs tuned in the library)
        from traceinsight.tuning import tune
    except ImportError:
        pass
    else:
        tune()
    cases = {**CASES, "fa3_serving": ("examples/fa3/serving_q64kv8d128_fa3_torch.pt.trace.json.gz",
                                      ("examples/fa3/serving_q64kv8d128_fa3_torch.sidecar.json.gz",), ())}
    stage: dict[str, float] = {}
    stage_fn = "attach"  # the model stage: the pipeline module's own reference, so every call is timed
    attach = getattr(pipeline, stage_fn)

    def timed(*a: Any, **k: Any) -> Any:
        w0, c0 = time.perf_counter(), time.process_time()
        out = attach(*a, **k)
        stage["wall_s"] = stage.get("wall_s", 0.0) + time.perf_counter() - w0
        stage["cpu_s"] = stage.get("cpu_s", 0.0) + time.process_time() - c0
        return out

    setattr(pipeline, stage_fn, timed)
    out: dict[str, dict[str, float]] = {}
    for name in names:
        trace, meta, ncu = cases[name]
        stage.clear()
        gc.collect()
        t0 = time.perf_counter()
        pipeline.analyze([REPO / trace], meta=[REPO / m for m in meta], ncu=[REPO / n for n in ncu], cache=False)
        out[name] = {**stage, "analyze_wall_s": time.perf_counter() - t0}
    return out


def run_traces(args: argparse.Namespace) -> None:
    names = args.cases.split(",") if args.cases else list(TRACE_CASES)
    sources = {"current": REPO}
    if args.baseline:
        sources["baseline"] = args.baseline.resolve()
    runs: dict[str, list[dict[str, dict[str, float]]]] = {n: [] for n in sources}
    loads: list[list[float]] = []
    for _ in range(args.runs):  # interleaved: drift in the machine's load hits every source alike
        for name, src in sources.items():
            loads.append([round(x, 2) for x in os.getloadavg()])
            proc = subprocess.run([sys.executable, __file__, "--trace-worker", ",".join(names)], env=_env(src),
                                  check=True, capture_output=True, text=True)
            runs[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    loads.append([round(x, 2) for x in os.getloadavg()])
    rows = []
    head = f"{'trace':42}" + "".join(f" {n + ' wall s':>15} {n + ' cpu s':>14}" for n in sources)
    print(head + ("  speed-up (wall, cpu)" if len(sources) > 1 else ""))
    for trace in names:
        row: dict[str, Any] = {"trace": trace}
        line = f"{trace:42}"
        for n in sources:
            for k in ("wall_s", "cpu_s", "analyze_wall_s"):
                row[f"{n}_{k}"] = statistics.median(r[trace][k] for r in runs[n])
            row[f"{n}_runs"] = [r[trace] for r in runs[n]]
            line += f" {row[f'{n}_wall_s']:15.2f} {row[f'{n}_cpu_s']:14.2f}"
        if "baseline" in sources:
            row["speedup_wall"] = row["baseline_wall_s"] / row["current_wall_s"]
            row["speedup_cpu"] = row["baseline_cpu_s"] / row["current_cpu_s"]
            line += f"  {row['speedup_wall']:6.1f}x {row['speedup_cpu']:6.1f}x"
        rows.append(row)
        print(line)
    totals = {n: {k: sum(r[f"{n}_{k}"] for r in rows) for k in ("wall_s", "cpu_s", "analyze_wall_s")}
              for n in sources}
    print(f"{'all (sum of medians)':42}" + "".join(f" {totals[n]['wall_s']:15.2f} {totals[n]['cpu_s']:14.2f}"
                                                   for n in sources)
          + (f"  {totals['baseline']['wall_s'] / totals['current']['wall_s']:6.1f}x "
             f"{totals['baseline']['cpu_s'] / totals['current']['cpu_s']:6.1f}x" if "baseline" in sources else ""))
    print(f"load average (1, 5, 15 min) before each run and at the end: {loads}")
    out = args.out or TRACES_RESULTS
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "machine": platform.platform(), "cpus": os.cpu_count(), "runs": args.runs, "load_average": loads,
        "sources": {n: str(p) for n, p in sources.items()}, "traces": rows, "totals": totals,
    }, indent=1) + "\n")
    print(f"wrote {out}")


def _env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src)}


def run_worker(src: Path) -> dict[str, dict[str, float]]:
    proc = subprocess.run([sys.executable, __file__, "--worker"], env=_env(src), check=True, capture_output=True,
                          text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_analyze(src: Path, meta: bool) -> tuple[float, float]:
    """(wall s, CPU s) of one `traceinsight analyze` of the example sweep, in a fresh process."""
    cmd = [sys.executable, "-c", "from traceinsight.cli import main; main()", "analyze",
           str(EXAMPLE / "flashinfer_decode_sweep.pt.trace.json.gz"), "--format", "json"]
    if meta:
        cmd += ["--meta", str(EXAMPLE / "flashinfer_decode_sweep.meta.json.gz")]
    c0, t0 = _children_cpu(), time.perf_counter()
    # cwd = src: `python -c` puts the working folder first on sys.path, ahead of PYTHONPATH.
    subprocess.run(cmd, env=_env(src), cwd=src, check=False, stdout=subprocess.DEVNULL)  # exit 1/2 = findings
    return time.perf_counter() - t0, _children_cpu() - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="folder holding the `traceinsight` package to compare against")
    ap.add_argument("--no-analyze", action="store_true", help="skip the end-to-end analyze timings")
    ap.add_argument("--traces", action="store_true", help="time the model stage on the real serving traces")
    ap.add_argument("--cases", help="with --traces: comma-separated case names (default: TRACE_CASES)")
    ap.add_argument("--out", type=Path, help="with --traces: results file")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--trace-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker()))
        return
    if args.trace_worker:
        print(json.dumps(trace_worker(args.trace_worker.split(","))))
        return
    if args.traces:
        run_traces(args)
        return
    sources = {"current": REPO}
    if args.baseline:
        sources["baseline"] = args.baseline.resolve()
    model: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in sources}
    analyze: dict[str, dict[str, list[tuple[float, float]]]] = {n: {"meta": [], "no_meta": []} for n in sources}
    if not args.no_analyze:
        run_analyze(REPO, True)  # warm the page cache and .pyc files
    for _ in range(args.runs):  # interleaved: drift in the machine's load hits every source alike
        for name, src in sources.items():
            model[name].append(run_worker(src))
            if not args.no_analyze:
                analyze[name]["no_meta"].append(run_analyze(src, False))
                analyze[name]["meta"].append(run_analyze(src, True))

    rows = []
    backends = [b for b, *_ in SWEEPS]
    head = f"{'backend':22} {'stage':15} {'items':>7}" + "".join(f" {n + ' s':>11}" for n in sources)
    print(head + (f" {'speed-up':>9}" if len(sources) > 1 else ""))
    for backend in backends:
        for stage in (*STAGES, "total"):
            med = {}
            for name in sources:
                per_run = [sum(r[backend][s] for s in STAGES) if stage == "total" else r[backend][stage]
                           for r in model[name]]
                med[name] = statistics.median(per_run)
            items = int(model["current"][0][backend]["items"])
            row = {"backend": backend, "stage": stage, "items": items, **{f"{n}_s": v for n, v in med.items()}}
            line = f"{backend:22} {stage:15} {items:7d}" + "".join(f" {med[n]:11.3f}" for n in sources)
            if "baseline" in med:
                row["speedup"] = med["baseline"] / med["current"] if med["current"] else None
                line += f" {row['speedup']:8.1f}x"
            rows.append(row)
            print(line)
    totals = {n: statistics.median(sum(r[b][s] for b in backends for s in STAGES) for r in model[n]) for n in sources}
    print(f"{'all':22} {'total':15} {'':7}" + "".join(f" {totals[n]:11.3f}" for n in sources)
          + (f" {totals['baseline'] / totals['current']:8.1f}x" if "baseline" in totals else ""))
    end_to_end: dict[str, dict[str, Any]] = {}
    if not args.no_analyze:
        print(f"\n{'analyze (examples/h200 sweep)':32}" + "".join(f" {n + ' wall s':>15} {n + ' cpu s':>15}"
                                                               for n in sources))
        for n in sources:
            end_to_end[n] = {}
            for case in ("no_meta", "meta"):
                runs = analyze[n][case]
                end_to_end[n][case] = {"wall_s": statistics.median(w for w, _ in runs),
                                       "cpu_s": statistics.median(c for _, c in runs), "runs": runs}
            for k in ("wall_s", "cpu_s"):
                end_to_end[n][f"meta_over_no_meta_{k[:-2]}"] = end_to_end[n]["meta"][k] / end_to_end[n]["no_meta"][k]
        for case in ("no_meta", "meta"):
            print(f"{('--meta' if case == 'meta' else 'no --meta'):32}" + "".join(
                f" {end_to_end[n][case]['wall_s']:15.2f} {end_to_end[n][case]['cpu_s']:15.2f}" for n in sources))
        print(f"{'--meta / no --meta':32}" + "".join(
            f" {end_to_end[n]['meta_over_no_meta_wall']:15.2f} {end_to_end[n]['meta_over_no_meta_cpu']:15.2f}"
            for n in sources))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "machine": platform.platform(), "cpus": os.cpu_count(), "runs": args.runs,
        "sources": {n: str(p) for n, p in sources.items()}, "model": rows, "model_total_s": totals,
        "analyze": end_to_end,
    }, indent=1) + "\n")
    print(f"\nwrote {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
