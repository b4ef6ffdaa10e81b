"""Which diagnostics fire on which cases of the real H200 captures, against the ground truth, with and without
the batch-composition sidecar.

Ground truth, independent of the rules:
- split-KV state per case: FlashInfer's own `plan_info` in the meta file (last int = split_kv);
- slow cases: the case's median attention time against the `uniform` case of the same path and batch size in
  the same trace (a skewed batch with split-KV working costs at most ~1.5x uniform; the cliff costs 10-40x);
- decode on a prefill kernel: every tensor-core (tc=1) case is decode run by a prefill-named kernel.
Checks:
- `split-kv-off` fires exactly for the skewed cases the planner left unsplit, never for uniform batches;
- `split-kv-starved` for skewed cases split on yet >= 2x uniform;
- `decode-on-prefill-kernel` for every tensor-core case;
- `latency-spike`, the sweep read as a time series: hit rate = slow steps it names / slow steps (slow: >= 2x
  the uniform case), false alarms = steps it names that are not slow, cause = split-kv-off for unsplit cases
  and split-kv-starved for split ones on the split-KV backends.
The serving replays of examples/collected are checked too (truth: the sidecar's planned split_kv per step), and
our FlashAttention-3 captures (examples/fa3; truth: FA3's scheduler metadata and call arguments per step).

    .venv/bin/python benchmarks/validate_diagnostics.py [--traces DIR] [--examples DIR]

Prints tables and writes benchmarks/results/validate_diagnostics.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from traceinsight.pipeline import analyze  # noqa: E402

CASE = re.compile(r"tc=(\d)(?: backend=(\w+))? dist=(\w+) bs=(\d+)")
SLOW_RATIO = 2.0  # a case is slow when its median attention time is at least this many times uniform's
SWEEPS = [
    ("flashinfer_decode_sweep.pt.trace.json.gz", "flashinfer_decode_sweep.meta.json.gz"),
    ("flashinfer_fa2_decode_sweep.pt.trace.json.gz", "flashinfer_fa2_decode_sweep.meta.json.gz"),
]
SERVING = [
    ("serving_q64kv8d128_torch.pt.trace.json.gz", "serving_q64kv8d128_torch.sidecar.json.gz"),
    ("serving_q64kv8d128_graph_torch.pt.trace.json.gz", "serving_q64kv8d128_graph_torch.sidecar.json.gz"),
]


def load_meta(path: Path) -> dict[tuple[int, str, int], dict[str, Any]]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return {(c["tc"], c["dist"], c["B"]): c for c in doc["cases"]}


def case_of(name: str) -> tuple[int, str, int] | None:
    m = CASE.search(name)
    return (int(m[1]), m[3], int(m[4])) if m else None


def rules_by_step(a: Any) -> dict[int, set[str]]:
    out: dict[int, set[str]] = defaultdict(set)
    for f in a.findings:
        for s in f.steps:
            out[s].add(f.id)
    return out


def spike_cause(a: Any) -> dict[int, str | None]:
    return {s: f.evidence.get("cause") for f in a.findings if f.id == "latency-spike" for s in f.steps}


def prf(pred: set[Any], truth: set[Any]) -> dict[str, Any]:
    tp = len(pred & truth)
    return {"true_positives": tp, "false_positives": len(pred - truth), "false_negatives": len(truth - pred),
            "recall": round(tp / len(truth), 4) if truth else None,
            "precision": round(tp / len(pred), 4) if pred else None}


def validate_sweep(trace: Path, meta: Path, with_meta: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    _, [a] = analyze([trace], meta=[meta] if with_meta else [])
    seconds = time.perf_counter() - t0
    cases = load_meta(meta)
    steps_of: dict[tuple[int, str, int], list[int]] = defaultdict(list)
    for st in a.steps:
        c = case_of(st.name)
        if c is not None:
            steps_of[c].append(st.index)
    dur = {st.index: st.launches[0].attention.dur_ns for st in a.steps}
    med = {c: statistics.median(dur[i] for i in ix) for c, ix in steps_of.items()}
    fired = rules_by_step(a)
    causes = spike_cause(a)
    rows = []
    for c in sorted(steps_of, key=lambda k: (k[0], k[1], k[2])):
        info = cases[c]["plan_info"]
        split = bool(info[-1]) if len(info) in (10, 15) else False  # SM90 (9 ints) never splits
        uniform = med.get((c[0], "uniform", c[2]))
        slowdown = med[c] / uniform if uniform else None
        rules = sorted(set().union(*(fired[i] for i in steps_of[c])))
        rows.append({"tc": c[0], "dist": c[1], "B": c[2], "planner_split_kv": split, "plan_info_len": len(info),
                     "median_ns": round(med[c]), "uniform_median_ns": round(uniform) if uniform else None,
                     "slowdown_vs_uniform": round(slowdown, 2) if slowdown else None,
                     "slow": bool(slowdown and slowdown >= SLOW_RATIO), "rules": rules,
                     "spike_cause": sorted({str(causes.get(i)) for i in steps_of[c] if i in causes})})
    key = [(r["tc"], r["dist"], r["B"]) for r in rows]
    by = dict(zip(key, rows, strict=True))
    splitting = {k for k, r in by.items() if r["plan_info_len"] in (10, 15)}
    truth_off = {k for k in splitting if not by[k]["planner_split_kv"] and k[1] != "uniform"}
    truth_starved = {k for k in splitting if by[k]["planner_split_kv"] and by[k]["slow"] and k[1] != "uniform"}
    truth_tc = {k for k in key if k[0] == 1}
    fired_case = {rule: {k for k in key if rule in by[k]["rules"]} for rule in
                  ("split-kv-off", "split-kv-starved", "decode-on-prefill-kernel", "latency-spike")}
    # Latency spikes per step (the time series), against slow steps.
    slow_steps = {i for k in key if by[k]["slow"] for i in steps_of[k]}
    spike_steps = set(causes)
    cause_ok = cause_n = 0
    for k in key:
        if k in splitting and by[k]["slow"]:
            want = "split-kv-off" if not by[k]["planner_split_kv"] else "split-kv-starved"
            for i in steps_of[k]:
                if i in causes:
                    cause_n += 1
                    cause_ok += causes[i] == want
    spikes_by_path = {}
    for path_tc in sorted({k[0] for k in key}):
        ss = {i for k in key if k[0] == path_tc for i in steps_of[k]}
        spikes_by_path[path_tc] = prf(spike_steps & ss, slow_steps & ss)
    return {
        "trace": trace.name, "with_meta": with_meta, "analysis_seconds": round(seconds, 2), "steps": len(a.steps),
        "thresholds": [t.to_json() for t in a.schedule.thresholds.values()] if a.schedule else [],
        "split_kv_off": {**prf(fired_case["split-kv-off"], truth_off),
                         "fires_for_uniform": sorted(k for k in fired_case["split-kv-off"] if k[1] == "uniform")},
        "split_kv_starved": prf(fired_case["split-kv-starved"], truth_starved),
        "decode_on_prefill_kernel": prf(fired_case["decode-on-prefill-kernel"], truth_tc),
        "latency_spike_steps": {**prf(spike_steps, slow_steps), "by_tc": spikes_by_path,
                                "cause_correct": cause_ok, "cause_checked": cause_n},
        "cases": rows,
    }


def validate_serving(trace: Path, sidecar: Path, with_meta: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    _, [a] = analyze([trace], meta=[sidecar] if with_meta else [])
    seconds = time.perf_counter() - t0
    doc = json.loads(gzip.decompress(sidecar.read_bytes()))
    plan = {s["key"]: s for s in doc["steps"]}
    truth_off: set[int] = set()
    cuda_core: set[int] = set()
    for st in a.steps:
        row = next((s for k, s in plan.items() if set(k.split()) <= set(st.name.split())), None)
        if row is None or row.get("path") != "cuda-core":
            continue
        cuda_core.add(st.index)
        if row["plan"]["split_kv"] is False:
            truth_off.add(st.index)
    off = {s for f in a.findings if f.id == "split-kv-off" for s in f.steps} & cuda_core
    causes = spike_cause(a)
    spikes = set(causes) & cuda_core
    return {"trace": trace.name, "with_meta": with_meta, "analysis_seconds": round(seconds, 2),
            "cuda_core_steps": len(cuda_core), "planner_split_off_steps": len(truth_off),
            "split_kv_off": prf(off, truth_off), "latency_spike_steps": prf(spikes, truth_off),
            "spike_causes": sorted({str(c) for s, c in causes.items() if s in cuda_core})}


FA3_TRACES = [
    ("sweep_q32kv4d128_fa3_torch.pt.trace.json.gz", "sweep_q32kv4d128_fa3_torch.sidecar.json.gz"),
    ("sweep_q64kv8d128_fa3_torch.pt.trace.json.gz", "sweep_q64kv8d128_fa3_torch.sidecar.json.gz"),
    ("variants_q32kv4d128_fa3_torch.pt.trace.json.gz", "variants_q32kv4d128_fa3_torch.sidecar.json.gz"),
    ("variants_q64kv8d128_fa3_torch.pt.trace.json.gz", "variants_q64kv8d128_fa3_torch.sidecar.json.gz"),
]


def validate_fa3(trace: Path, sidecar: Path, with_meta: bool) -> dict[str, Any]:
    """FA3 (examples/fa3): truth per step from FA3's own scheduler metadata in the sidecar (a request cut or
    not) and the call's arguments (num_splits forced to 1). split-kv-off must fire exactly for the skewed steps
    nothing was cut in (B > 992, or num_splits = 1), with the right reason, and never for uniform batches."""
    doc = json.loads(gzip.decompress(sidecar.read_bytes()))
    truth = {st["key"]: st for st in doc["steps"]}
    t0 = time.perf_counter()
    _, (a,) = analyze([trace], meta=[sidecar] if with_meta else [], cache=False)
    seconds = round(time.perf_counter() - t0, 2)
    off = {s: f.evidence.get("why_unsplit") for f in a.findings if f.id == "split-kv-off" for s in f.steps}
    tp = fp = fn = right = 0
    for st in a.steps:
        key = next((k for k in truth if all(t in st.name.split() for t in k.split())), None)
        if key is None:
            continue
        t = truth[key]
        uncut = not any(x > 1 for x in t["plan"]["splits"])
        skewed = t.get("dist") != "uniform"
        expect = uncut and skewed
        reason = ("batch-cap" if t["batch_size"] > 992 else "forced-num-splits" if t["call"]["num_splits"] == 1
                  else "static-heuristic")
        got = st.index in off
        tp += expect and got
        fp += got and not expect
        fn += expect and not got
        right += got and expect and off[st.index] == reason
    return {"trace": trace.name, "with_meta": with_meta, "steps": len(a.steps), "analysis_seconds": seconds,
            "split_kv_off": {"true_positives": tp, "false_positives": fp, "false_negatives": fn,
                             "reason_correct": right}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "traces" / "h200")
    ap.add_argument("--examples", type=Path, default=REPO / "examples" / "collected")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "validate_diagnostics.json")
    args = ap.parse_args()
    results: dict[str, Any] = {"slow_ratio": SLOW_RATIO, "sweeps": [], "serving": []}
    for trace, meta in SWEEPS:
        for with_meta in (True, False):
            r = validate_sweep(args.traces / trace, args.traces / meta, with_meta)
            results["sweeps"].append(r)
            mode = "with meta" if with_meta else "trace only"
            print(f"\n== {trace} ({mode}; {r['steps']} steps, analyzed in {r['analysis_seconds']} s)")
            for t in r["thresholds"]:
                print(f"  threshold {t['kernel']} [{t['backend']}]: occ {t['occupancy']}, max_grid {t['max_grid']}, "
                      f"kv_heads {t['kv_heads']}, B_th {t['b_threshold']}")
            for name in ("split_kv_off", "split_kv_starved", "decode_on_prefill_kernel"):
                m = r[name]
                print(f"  {name:26s} cases: TP {m['true_positives']:3d}  FP {m['false_positives']:3d}  "
                      f"FN {m['false_negatives']:3d}  (recall {m['recall']}, precision {m['precision']})")
            print(f"  split-kv-off fires for uniform cases: {r['split_kv_off']['fires_for_uniform'] or 'never'}")
            m = r["latency_spike_steps"]
            print(f"  latency-spike steps vs slow steps (>= {SLOW_RATIO}x uniform): hit rate {m['recall']} "
                  f"({m['true_positives']}/{m['true_positives'] + m['false_negatives']}), false alarms "
                  f"{m['false_positives']}, cause right {m['cause_correct']}/{m['cause_checked']}")
            for tc, pm in m["by_tc"].items():
                print(f"    tc={tc}: hit rate {pm['recall']} ({pm['true_positives']}/"
                      f"{pm['true_positives'] + pm['false_negatives']}), false alarms {pm['false_positives']}")
            missed = [f"{c['dist']} B={c['B']} ({c['slowdown_vs_uniform']}x)" for c in r["cases"]
                      if c["slow"] and "latency-spike" not in c["rules"]]
            if missed:
                print(f"    slow cases not named as spikes: {', '.join(missed)}")
    for trace, sidecar in SERVING:
        if not (args.examples / trace).exists():
            continue
        for with_meta in (True, False):
            r = validate_serving(args.examples / trace, args.examples / sidecar, with_meta)
            results["serving"].append(r)
            mode = "with sidecar" if with_meta else "trace only"
            print(f"\n== {trace} ({mode}; analyzed in {r['analysis_seconds']} s): {r['cuda_core_steps']} CUDA-core "
                  f"steps, {r['planner_split_off_steps']} planned split-off")
            for name in ("split_kv_off", "latency_spike_steps"):
                m = r[name]
                print(f"  {name:20s} vs planned split-off steps: TP {m['true_positives']}  FP {m['false_positives']}  "
                      f"FN {m['false_negatives']}  (recall {m['recall']}, precision {m['precision']})")
            print(f"  spike causes: {r['spike_causes']}")
    results["fa3"] = []
    for trace, sidecar in FA3_TRACES:
        for with_meta in (True, False):
            r = validate_fa3(REPO / "examples" / "fa3" / trace, REPO / "examples" / "fa3" / sidecar, with_meta)
            results["fa3"].append(r)
            m = r["split_kv_off"]
            mode = "with sidecar" if with_meta else "trace only"
            print(f"\n== {trace} ({mode}; {r['steps']} steps, {r['analysis_seconds']} s): split-kv-off vs skewed "
                  f"steps FA3 cut nothing in: TP {m['true_positives']}  FP {m['false_positives']}  "
                  f"FN {m['false_negatives']}; reason right {m['reason_correct']}/{m['true_positives']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
