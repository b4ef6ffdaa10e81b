"""What the step breakdown and the differential attribution cost: `traceinsight analyze` on the 1 GB Kineto
benchmark input (benchmarks/ingest_scale.py builds it: the real H200 sweep replicated), this checkout against a
baseline commit from before them, in fresh processes taken in turns, with the cache off.

    .venv/bin/python benchmarks/breakdown_cost.py [--size 1G] [--repeat 3] [--baseline-ref 292bb81]
        [--scratch /tmp/traceinsight-bench] [--out benchmarks/results/breakdown_cost.json]

The baseline is checked out in a git worktree under the scratch folder and imported from there (the editable
install's finder is taken off sys.meta_path), with this checkout's venv. The machine is shared and noisy:
the ratio of medians taken in the same run is the number to quote. Also times the stages in this checkout's
process (benchmarks/analyze_stages.py) so the breakdown's own share is visible.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest_scale import (  # noqa: E402
    DEFAULT_SCRATCH,
    _stamp,
    _write_stamp,
    build_kineto,
    kineto_copies_for,
    kineto_template,
    measure,
    parse_size,
    size_label,
)

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "breakdown_cost.json"
# Runs `traceinsight analyze` from the checkout at sys.argv[1] (not the editable install).
RUNNER = (
    "import sys; root = sys.argv.pop(1); "
    "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in type(f).__name__.lower() "
    "and 'editable' not in repr(f).lower()]; sys.path.insert(0, root); "
    "from traceinsight.cli.main import main; sys.argv[0] = 'traceinsight'; main()"
)


def worktree(ref: str, scratch: Path) -> Path:
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", ref], check=True, capture_output=True,
                            text=True).stdout.strip()
    where = scratch / f"baseline-{commit[:10]}"
    if not (where / "traceinsight").is_dir():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(where), commit], check=True,
                       capture_output=True)
    return where


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="1G")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline-ref", default="292bb81", help="a commit before the step breakdown")
    ap.add_argument("--scratch", type=Path, default=DEFAULT_SCRATCH)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    args.scratch.mkdir(parents=True, exist_ok=True)
    template = kineto_template()
    copies = kineto_copies_for(parse_size(args.size), template)
    path = args.scratch / f"kineto_{size_label(parse_size(args.size))}" / "rank0.pt.trace.json"  # as ingest_scale
    if not path.exists() or _stamp(path) != copies:
        build_kineto(path, copies, template)
        _write_stamp(path, copies)
    base = worktree(args.baseline_ref, args.scratch)
    py = sys.executable
    cmds = {
        "this checkout": [py, "-c", RUNNER, str(REPO), "analyze", str(path), "--format", "json", "--no-cache"],
        f"baseline {args.baseline_ref}": [py, "-c", RUNNER, str(base), "analyze", str(path), "--format", "json",
                                          "--no-cache"],
    }
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in cmds}
    for i in range(args.repeat):
        for name, cmd in cmds.items():
            r = measure(cmd)
            if not r.ok:
                raise SystemExit(f"{name}: {r.note}")
            runs[name].append({"wall_s": round(r.wall_s, 3), "cpu_s": round(r.cpu_s, 3), "rss_mb": round(r.rss_mb)})
            print(f"run {i + 1}: {name}: {r.wall_s:.2f} s wall, {r.cpu_s:.2f} s CPU, {r.rss_mb:.0f} MB", flush=True)
    med = {k: statistics.median(x["wall_s"] for x in v) for k, v in runs.items()}
    cpu = {k: statistics.median(x["cpu_s"] for x in v) for k, v in runs.items()}
    this, baseline = cmds
    stages_file = args.scratch / "breakdown_cost_stages.json"
    subprocess.run([py, str(REPO / "benchmarks" / "analyze_stages.py"), str(path), "--out", str(stages_file)],
                   check=True, capture_output=True)
    stages = stages_file.read_text()
    result = {
        "input": str(path), "bytes": path.stat().st_size, "copies": copies, "repeat": args.repeat,
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "median_wall_s": med, "median_cpu_s": cpu,
        "added_wall_fraction": round(med[this] / med[baseline] - 1, 4),
        "added_cpu_fraction": round(cpu[this] / cpu[baseline] - 1, 4),
        "runs": runs,
        "stages_this_checkout": json.loads(stages),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"added: {100 * result['added_wall_fraction']:+.1f}% wall, {100 * result['added_cpu_fraction']:+.1f}% CPU "
          f"(median of {args.repeat}); written to {args.out}")


if __name__ == "__main__":
    main()
