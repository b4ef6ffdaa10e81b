"""The rules stage (`diagnose`) against a reference checkout's, in one run: CPU-s per rule of the reference's
rules and this checkout's on the same analysis, and whether the two gave identical findings and rule outcomes
(every finding's JSON, in order, and every check).

    git worktree add /tmp/ref main   # or any checkout
    python -P benchmarks/rules_speed.py TRACE [--meta SIDECAR] [--ncu CSV] [--ref /tmp/ref] [--profile RULE]
        [--repeat N] [--out F.json]

Findings are compared with their step savings (`Finding.step_saving_ns`, in order), which their JSON leaves out.
The trace is analyzed once, by this checkout, up to the rules. The reference's modules of the rules stage (every
module under traceinsight/diagnose, and any other that differs) stand in for ours while its rules run (as in
benchmarks/tables_speed.py); each side starts from the
analysis as the rules stage finds it (no findings, the pipeline's cache). `--profile RULE`: cProfile this
checkout's RULE (cumulative time, top 40 lines) instead of comparing. Exits 1 when the findings differ.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tables_speed import Swap  # noqa: E402  (the same module swap)


def _run(ctx: Any, cache: dict[str, Any], profile: str | None = None) -> tuple[dict[str, float], list[Any], list[Any]]:
    """Run the current traceinsight.diagnose on `ctx` from `cache`: CPU-s per rule (and 'all'), findings, checks."""
    from traceinsight.diagnose import registry
    from traceinsight.diagnose.run import diagnose
    from traceinsight.tuning import gc_paused

    print(f"rules from {Path(registry.__file__).parents[2]}", flush=True)
    times: dict[str, float] = {}
    originals = {r: r.apply for r in registry.RULES}

    def timed(rid: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any, **k: Any) -> Any:
            prof = cProfile.Profile(time.process_time) if profile and rid in profile.split(",") else None
            c0 = time.process_time()
            if prof is not None:
                prof.enable()
            out = fn(*a, **k)
            if prof is not None:
                prof.disable()
                buf = io.StringIO()
                pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(40)
                print(f"== {rid}", buf.getvalue(), flush=True)
            times[rid] = time.process_time() - c0
            return out
        return run

    for r in registry.RULES:
        r.apply = timed(r.ID, r.apply)
    ctx.cache = dict(cache)
    if ctx.schedule is not None:  # what the schedule caches for the rules (launch views) is made again
        ctx.schedule.cache.clear()
    ctx.findings, ctx.checks = [], []
    try:
        c0 = time.process_time()
        with gc_paused():  # as the pipeline runs the rules
            found = diagnose(ctx)
        times["all"] = time.process_time() - c0
    finally:
        for r, fn in originals.items():
            r.apply = fn
    # Each finding's JSON with its step savings (which the JSON leaves out; root-cause attribution reads them),
    # in order, key by key.
    return times, [{**f.to_json(), "step_saving_ns": list(f.step_saving_ns.items())} for f in found], \
        [asdict(c) for c in ctx.checks]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", type=Path)
    ap.add_argument("--meta", type=Path, action="append", default=[])
    ap.add_argument("--ncu", type=Path, action="append", default=[])
    ap.add_argument("--ref", type=Path, default=Path("/tmp/ref"))
    ap.add_argument("--profile", help="cProfile these rules (comma-separated) of this checkout (no reference run)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of both rule sets, interleaved (medians printed)")
    ap.add_argument("--out", type=Path, help="write every run's CPU-s per rule, the medians and the outcome as JSON")
    args = ap.parse_args()
    from traceinsight.tuning import tune

    tune()  # the process as the command's entry tunes it
    swap = Swap(args.ref)
    # Every module of the rules stage from the reference, not only those whose text differs: one that is the same
    # still holds the modules it imported (registry.RULES, run.consolidate), which would be this checkout's.
    stage = sorted(".".join(p.relative_to(args.ref).with_suffix("").parts).removesuffix(".__init__")
                   for p in (args.ref / "traceinsight" / "diagnose").rglob("*.py"))
    swap.names = sorted(set(swap.names) | set(stage))
    swap.finder.names = set(swap.names)
    import traceinsight.pipeline as pipeline

    held: list[Any] = []

    def capture(ctx: Any) -> list[Any]:  # the analysis as the rules stage gets it
        held.append((ctx, dict(ctx.cache)))
        return []

    pipeline.diagnose = capture
    t0 = time.process_time()
    db, _ = pipeline.analyze([args.trace], meta=args.meta, ncu=args.ncu, cache=False)
    ctx, cache = held[0]
    print(f"{args.trace.name}: analyzed up to the rules in {time.process_time() - t0:.1f} CPU-s; reference "
          f"modules: {', '.join(swap.names) or 'none differ'}", flush=True)
    if args.profile:
        times, _, _ = _run(ctx, cache, args.profile)
        print(", ".join(f"{r}: {t:.2f}" for r, t in sorted(times.items(), key=lambda rt: -rt[1])) + " CPU-s")
        os._exit(0)
    runs: list[dict[str, dict[str, float]]] = []
    same_findings = same_checks = True
    for _ in range(args.repeat):  # interleaved: the reference's rules, then ours, on the same analysis
        with swap.reference():
            old, old_found, old_checks = _run(ctx, cache)
        new, new_found, new_checks = _run(ctx, cache)
        runs.append({"old": old, "new": new})
        print(f"{'rule':26} {'old':>7} {'new':>7} {'new/old':>7}")
        for rid in sorted(old, key=lambda r: -old[r]):
            ratio = new.get(rid, 0.0) / old[rid] if old[rid] else float("nan")
            print(f"{rid:26} {old[rid]:7.2f} {new.get(rid, 0.0):7.2f} {ratio:7.2f}")
        same_findings &= json.dumps(old_found, sort_keys=True) == json.dumps(new_found, sort_keys=True)
        same_checks &= old_checks == new_checks
    if args.repeat > 1 or args.out:
        median = {side: {rid: statistics.median(r[side].get(rid, 0.0) for r in runs) for rid in runs[0]["old"]}
                  for side in ("old", "new")}
        ratios = {rid: statistics.median(r["new"].get(rid, 0.0) / r["old"][rid] for r in runs if r["old"][rid])
                  for rid in runs[0]["old"]}
        print(f"medians of {len(runs)} runs: {'rule':26} {'old':>7} {'new':>7} {'new/old (median of ratios)':>27}")
        for rid in sorted(median["old"], key=lambda r: -median["old"][r]):
            print(f"{'':19}{rid:26} {median['old'][rid]:7.2f} {median['new'][rid]:7.2f} {ratios.get(rid, 0.0):27.2f}")
        if args.out:
            args.out.write_text(json.dumps({"trace": str(args.trace), "ref": str(args.ref), "runs": runs,
                                            "median_cpu_s": median, "median_ratio": ratios,
                                            "identical_findings": same_findings, "identical_checks": same_checks},
                                           indent=1) + "\n")
    print(f"findings: {len(new_found)} (reference {len(old_found)}), identical: {same_findings}; "
          f"checks identical: {same_checks}", flush=True)
    if not same_findings:
        for i, (a, b) in enumerate(zip(old_found, new_found, strict=False)):
            if a != b:
                diff = {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
                print(f"first difference: finding {i} ({a['id']}): {str(diff)[:2000]}")
                break
    os._exit(0 if same_findings and same_checks else 1)


if __name__ == "__main__":
    main()
