"""The engine-trace table of docs/ENGINE_TRACES.md: every serving-engine trace in examples/engines (and the two in
tests/data/foreign/tracelens) analyzed as a user would (`analyze FILE`, no option), next to what the file holds
(examples/engines/inventory.json: iterations counted from the file by hand).

    .venv/bin/python benchmarks/engine_traces_table.py [EXTRA_TRACE ...]   # Markdown on stdout

Extra traces (e.g. public ones not committed for want of a license) are added as rows with '?' expected.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from traceinsight.pipeline import analyze

REPO = Path(__file__).resolve().parents[1]
ENGINES = REPO / "examples" / "engines"


def _row(path: Path, expected: object) -> str:
    db, (a,) = analyze([path], cache=False)
    trace = db.rows("SELECT * FROM traces WHERE trace_id = 0")[0]
    phases = Counter(s.phase for s in a.steps)
    sched = a.schedule
    batches = sorted({b.batch_size for b in (sched.batches.values() if sched else []) if b.batch_size is not None})
    graph = Counter((b.graph_mode or ("graph" if b.cuda_graph else "eager"))
                    for b in (sched.batches.values() if sched else []))
    gpu = a.gpu.get("name") or "unknown"
    if sched is not None and sched.gpu is not None:
        gpu = sched.gpu.name
    rank = trace.get("rank")
    world = trace.get("world_size")
    findings = Counter(f.id for f in a.findings)
    return "| " + " | ".join([
        f"`{path.name}`",
        a.extra.get("steps_from", "-"),
        f"{len(a.steps)} / {expected}",
        ", ".join(f"{k} {v}" for k, v in sorted(phases.items())) or "-",
        ", ".join(map(str, batches)) or "-",
        ", ".join(f"{k} {v}" for k, v in sorted(graph.items())) or "-",
        gpu,
        f"{rank} of {world}" if world is not None else "-",
        ", ".join(f"{k} ×{v}" for k, v in sorted(findings.items())) or "none",
    ]) + " |"


def main(extra: list[str]) -> None:
    inventory = json.loads((ENGINES / "inventory.json").read_text())["files"]
    print("| trace | steps from | steps / iterations in the file | phases | batch sizes | graphs (steps) | GPU | "
          "rank | findings |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, facts in inventory.items():
        print(_row((ENGINES / name).resolve(), facts.get("iterations_expected", "?")), flush=True)
    for p in extra:
        print(_row(Path(p).resolve(), "?"), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
