"""Golden snapshots of the analysis of every shared and committed trace: findings (rule, severity, steps, saving,
named cause), each launch's split state and schedule model. tests/test_golden.py holds today's analysis to them,
so that a refactor (the move of the analysis into DuckDB tables, issue 13) cannot change a result unnoticed.

Regenerate deliberately, after a change meant to alter results, and say why in the commit:

    .venv/bin/python tests/golden.py            # writes tests/golden/*.json.gz
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces"
GOLDEN = REPO / "tests" / "golden"

# name -> (trace, sidecars, ncu CSVs), paths relative to the repository root ('../shared/...' for shared ones).
# (FA3's serving replay, 35 s to analyze, is held by tests/test_fa3_model.py instead.)
CASES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "h200_sweep": ("../shared/traces/h200/flashinfer_decode_sweep.pt.trace.json.gz",
                   ("../shared/traces/h200/flashinfer_decode_sweep.meta.json.gz",), ()),
    "h200_sweep_trace_only": ("../shared/traces/h200/flashinfer_decode_sweep.pt.trace.json.gz", (), ()),
    "h200_fa2_sweep": ("../shared/traces/h200/flashinfer_fa2_decode_sweep.pt.trace.json.gz",
                       ("../shared/traces/h200/flashinfer_fa2_decode_sweep.meta.json.gz",), ()),
    "h200_small": ("../shared/traces/h200/flashinfer_decode_small.pt.trace.json.gz", (), ()),
    "h200_nsys": ("../shared/traces/h200/flashinfer_decode.sqlite",
                  ("../shared/traces/h200/flashinfer_decode.nsys.meta.json",),
                  ("../shared/traces/h200/flashinfer_decode.ncu.csv",)),
    "tracelens_qwen": ("../shared/traces/foreign/tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", (), ()),
    **{f"collected_{n}": (f"examples/collected/{n}.pt.trace.json.gz", (f"examples/collected/{n}.sidecar.json.gz",), ())
       for n in ("serving_q64kv8d128_torch", "serving_q64kv8d128_graph_torch", "sweep_q32kv4d128_torch",
                 "sweep_q32kv4d128_fp8_torch", "sweep_q64kv8d128_torch")},
    "collected_serving_graph_nsys": ("examples/collected/serving_q64kv8d128_graph_nsys.sqlite",
                                     ("examples/collected/serving_q64kv8d128_graph_nsys.sidecar.json.gz",), ()),
    "collected_sweep_nsys": ("examples/collected/sweep_q64kv8d128_nsys.sqlite",
                             ("examples/collected/sweep_q64kv8d128_nsys.sidecar.json",),
                             ("examples/collected/sweep_q64kv8d128_ncu.ncu.csv",)),
    **{f"loop_{n}": (f"examples/loop/loop_{n}.{'sqlite' if n.endswith('nsys') else 'pt.trace.json.gz'}",
                     (f"examples/loop/loop_{n}.sidecar.json.gz",), ())
       for n in ("fa2_torch", "core_torch", "core_graph_torch", "fa2_nsys", "core_graph_nsys")},
    **{f"fa3_{n}": (f"examples/fa3/{n}.pt.trace.json.gz", (f"examples/fa3/{n}.sidecar.json.gz",), ())
       for n in ("sweep_q32kv4d128_fa3_torch", "sweep_q64kv8d128_fa3_torch", "variants_q32kv4d128_fa3_torch")},
    "fa3_nsys": ("examples/fa3/sweep_q32kv4d128_fa3_nsys.sqlite",
                 ("examples/fa3/sweep_q32kv4d128_fa3_nsys.sidecar.json.gz",), ()),
}
# Evidence keys a golden keeps (the named causes; numbers live in the models and savings).
EVIDENCE_KEYS = ("cause", "cause_detail", "cause_component", "why_unsplit", "why_starved", "first_step",
                 "threshold_step", "worst_step", "kernel", "backend")


def snapshot(a: Any) -> dict[str, Any]:
    """What a golden holds of one analysis (a TraceAnalysis)."""
    sched = a.schedule
    steps = []
    for s in a.steps:
        launches = []
        for x in s.launches:
            m = sched.models.get(x.attention.kernel_id) if sched else None
            launches.append([x.attention.kernel, x.phase, x.split_kv,
                             None if m is None else m.predicted_ns,
                             None if m is None or m.sm_idle is None else round(m.sm_idle, 4)])
        steps.append({"name": s.name, "wall_ns": s.wall_ns, "launches": launches})
    findings = sorted(([f.id, f.severity.value, list(f.steps), f.saving_ns,
                        {k: f.evidence[k] for k in EVIDENCE_KEYS if k in f.evidence}] for f in a.findings),
                      key=lambda r: json.dumps(r, sort_keys=True))
    return {"steps": steps, "findings": findings, "checks": [[c.id, c.status] for c in a.checks]}


def analyze_golden(name: str) -> tuple[Any, Any]:
    """The database and the analysis of case `name`."""
    from traceinsight.pipeline import analyze

    trace, meta, ncu = CASES[name]
    db, (a,) = analyze([REPO / trace], meta=[REPO / m for m in meta], ncu=[REPO / n for n in ncu], cache=False)
    return db, a


def snapshot_json(a: Any) -> dict[str, Any]:
    return json.loads(json.dumps(snapshot(a)))  # the JSON form (tuples -> lists)


def analyze_case(name: str) -> dict[str, Any]:
    return snapshot_json(analyze_golden(name)[1])


def path(name: str) -> Path:
    return GOLDEN / f"{name}.json.gz"


def main(names: list[str]) -> None:
    GOLDEN.mkdir(exist_ok=True)
    for name in names or list(CASES):
        data = json.dumps(analyze_case(name), separators=(",", ":"), sort_keys=True).encode()
        path(name).write_bytes(gzip.compress(data, mtime=0))
        print(f"{path(name).relative_to(REPO)}: {len(data):,} bytes")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main(sys.argv[1:])
