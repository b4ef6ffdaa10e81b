"""The regression gate (`traceinsight diff --fail-on-regression`) on pairs of real captures: A/A pairs (the same
workload captured twice, or under two profilers: every group must stay unchanged, exit 0) and A/B pairs (one
change injected: the right group must regress or improve, with its cause, exit 3 on a regression).

    python benchmarks/gate_table.py [--threshold 5%] [--out results.json] [--only NAME ...]

For each pair: the `traceinsight diff` exit status under --fail-on-regression, the step groups and kernel groups
compared, the largest |median change| of any paired group (the A/A pairs' is the run-to-run floor a threshold must
stay above), and the groups that regressed / improved with their change, interval and cause. Pairs come from
PAIRS below (examples/loop) and from every examples/**/abtest.truth.json (the A/A and A/B captures of
collectors/abtest.py; each pair there says what was injected and where it must show).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
LOOP = ROOT / "examples" / "loop"


def _loop(name: str) -> tuple[str, str]:
    ext = "sqlite" if name.endswith("nsys") else "pt.trace.json.gz"
    return str(LOOP / f"loop_{name}.{ext}"), str(LOOP / f"loop_{name}.sidecar.json.gz")


# name -> (kind, before (trace, sidecar), after (trace, sidecar), what must show)
PAIRS: dict[str, tuple[str, tuple[str, str], tuple[str, str], str]] = {
    "loop fa2: torch vs nsys": ("A/A kernels", _loop("fa2_torch"), _loop("fa2_nsys"), "every kernel group unchanged"),
    "loop core graph: torch vs nsys": ("A/A kernels", _loop("core_graph_torch"), _loop("core_graph_nsys"),
                                       "every kernel group unchanged"),
    "loop core: graph -> eager": ("A/B", _loop("core_graph_torch"), _loop("core_torch"),
                                  "GPU time unchanged; wall time regressed (said, not gated: idle-host)"),
}


def truth_files() -> list[Path]:
    """Every abtest.truth.json under examples/ (collectors/abtest.py writes one beside its captures)."""
    return sorted((ROOT / "examples").glob("**/abtest.truth.json"))


def truth_pairs() -> dict[str, tuple[str, tuple[str, str], tuple[str, str], str]]:
    """The pairs of each abtest.truth.json (schema traceinsight.abtest/1): runs by name, pairs of run names."""
    out = {}
    for path in truth_files():
        doc = json.loads(path.read_text())
        runs = {r["name"]: r for r in doc.get("runs") or []}

        def side(name: str, folder: Path = path.parent, runs: dict[str, Any] = runs) -> tuple[str, str]:
            r = runs[name]
            return str(folder / r["trace"]), str(folder / r["sidecar"]) if r.get("sidecar") else ""

        for p in doc.get("pairs") or []:
            if p["before"] not in runs or p["after"] not in runs:
                continue
            expect = p["expect"] + (f" in {p['group']}" if p.get("group") else "") + (
                f" ({p['change']})" if p.get("change") else "") + (f"; {p['compare']}" if p.get("compare") else "")
            out[f"{path.parent.name}: {p['before']} vs {p['after']}"] = (
                p.get("kind", "A/B"), side(p["before"]), side(p["after"]), expect)
    return out


def run_pair(before: tuple[str, str], after: tuple[str, str], threshold: str,
             extra: tuple[str, ...] = ()) -> tuple[int, dict[str, Any], float]:
    from traceinsight.cli import main

    args = ["diff", before[0], after[0], "--format", "json", "--fail-on-regression", threshold, *extra]
    if before[1]:
        args += ["--meta-before", before[1]]
    if after[1]:
        args += ["--meta-after", after[1]]
    t0 = time.perf_counter()
    r = CliRunner().invoke(main, args)
    wall = time.perf_counter() - t0
    if r.exit_code not in (0, 3):
        raise SystemExit(f"diff failed ({r.exit_code}): {r.output.strip()}")
    return r.exit_code, json.loads(r.stdout), wall


def summarize(d: dict[str, Any]) -> dict[str, Any]:
    g = d["gate"]
    paired = [x for x in g["step_groups"] + g["kernel_groups"] if x["metrics"]]
    changes = [(abs(x["metrics"]["median"]["change"]), x["group"], x["metrics"]["median"]["change"])
               for x in paired if x["metrics"]["median"]["change"] is not None and
               x["metrics"]["median"]["ci_low"] is not None]
    largest = max(changes) if changes else None
    moved = [{"group": x["group"], "verdict": x["verdict"], "median": x["metrics"]["median"]["change"],
              "ci": [x["metrics"]["median"]["ci_low"], x["metrics"]["median"]["ci_high"]],
              "p90": x["metrics"]["p90"]["change"], "per_step_ns": x["per_step_ns"],
              "causes": [c["text"] for c in x["causes"]]}
             for x in paired if x["verdict"] in ("regressed", "improved")]
    return {"step_groups_paired": sum(1 for x in g["step_groups"] if x["metrics"]),
            "kernel_groups_paired": sum(1 for x in g["kernel_groups"] if x["metrics"]),
            "unpaired": sum(1 for x in g["step_groups"] + g["kernel_groups"] if not x["metrics"]),
            "largest_median_change": None if largest is None else {"group": largest[1], "change": largest[2]},
            "moved": moved}


def calibrated_runs(pairs: dict[str, tuple[str, tuple[str, str], tuple[str, str], str]],
                    threshold: str) -> list[dict[str, Any]]:
    """Each abtest pair again under `threshold` with the A/A diffs as --noise (an A/A pair: the other A/A pairs,
    leave-one-out), printed and returned."""
    import tempfile

    aa = {n: p for n, p in pairs.items() if p[0] == "A/A" and n.startswith("abtest")}
    if not aa:
        return []
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for n, (_, b, a, _) in aa.items():
            files[n] = Path(tmp) / f"{len(files)}.json"
            files[n].write_text(json.dumps(run_pair(b, a, "5%")[1]))
        print(f"\ncalibrated: --fail-on-regression {threshold} with the A/A diffs as --noise "
              "(an A/A pair: the other two)")
        for n, (kind, b, a, _) in pairs.items():
            if not n.startswith("abtest") or kind == "kineto-vs-nsys":
                continue
            noise = tuple(x for m, f in files.items() if m != n for x in ("--noise", str(f)))
            code, d, _ = run_pair(b, a, threshold, noise)
            s = summarize(d)
            moved = "; ".join(f"{m['verdict']} {m['group'][:50]} (median {m['median']:+.1%}, p90 {m['p90']:+.1%})"
                              for m in s["moved"]) or "-"
            print(f"{n[:44]:44} {kind:12} {code:>4}  {moved}")
            out.append({"pair": n, "kind": kind, "exit": code, "moved": s["moved"]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threshold", default="5%")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--calibrated-threshold", default="1%",
                    help="the threshold of the calibrated runs (A/A diffs as --noise)")
    args = ap.parse_args()
    pairs = {**PAIRS, **truth_pairs()}
    results = []
    print(f"{'pair':44} {'kind':12} {'exit':>4} {'steps':>5} {'kern':>5} {'largest |median change| (group)':58} "
          "moved")
    for name, (kind, before, after, expect) in pairs.items():
        if args.only and name not in args.only:
            continue
        code, d, wall = run_pair(before, after, args.threshold)
        s = summarize(d)
        lg = s["largest_median_change"]
        largest = f"{lg['change']:+.2%} ({lg['group'][:46]})" if lg else "-"
        print(f"{name[:44]:44} {kind:12} {code:>4} {s['step_groups_paired']:>5} {s['kernel_groups_paired']:>5} "
              f"{largest:58} {len(s['moved'])}")
        for m in s["moved"]:
            print(f"    {m['verdict']:9} {m['group'][:70]}: median {m['median']:+.1%} "
                  f"[{m['ci'][0]:+.1%}, {m['ci'][1]:+.1%}], {m['per_step_ns'] / 1e3:+.1f} us/step"
                  + "".join(f"; {c}" for c in m["causes"]))
        if expect:
            print(f"    expected: {expect}")
        results.append({"pair": name, "kind": kind, "expect": expect, "exit": code, "wall_s": round(wall, 2),
                        "noise_floor": d["gate"]["noise_floor"], **s})
    calibrated = calibrated_runs(pairs, args.calibrated_threshold) if not args.only else []
    if args.out:
        args.out.write_text(json.dumps({"threshold": args.threshold, "pairs": results, "calibrated": calibrated},
                                       indent=2) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
