"""A digest of everything the schedule model outputs on the real traces, to check that a speed change changed no
result, bit for bit: per trace (tests/golden.py's cases and FA3's serving replay), every launch model, every plan
(its fields and every work item), every simulation (times as floats, per-SM busy time, tail intervals, every segment
and tail item), the calibrated costs, batches, notes, the golden snapshot and the findings with their evidence.

    PYTHONPATH=DIR .venv/bin/python benchmarks/model_digest.py [CASE ...] > digest_DIR.txt

Run it once for each copy of the package (DIR: this checkout, or a snapshot such as
`git archive main traceinsight | tar -x -C /tmp/base`) and diff the outputs (the seconds column aside).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FA3_SERVING = ("examples/fa3/serving_q64kv8d128_fa3_torch.pt.trace.json.gz",
               ("examples/fa3/serving_q64kv8d128_fa3_torch.sidecar.json.gz",), ())


def _item(w: Any) -> tuple[Any, ...]:
    return (w.request, w.kv_head, w.chunk_index, w.kv_start, w.kv_tokens, w.qo_head, w.qo_tile, w.cta, w.worker)


def digest(a: Any, snapshot: Any) -> str:
    h = hashlib.sha256()
    s = a.schedule
    if s is not None:
        h.update(repr(sorted(s.costs.items())).encode())
        h.update(repr(s.notes).encode())
        h.update(repr(sorted((k, v.to_json()) for k, v in s.batches.items())).encode())
        for kid in sorted(s.models):
            m = s.models[kid]
            # The model's compared fields by name (its kernel id is its key: a field of older copies).
            h.update(repr((kid, [(f.name, getattr(m, f.name)) for f in fields(m)
                                 if f.compare and f.name != "kernel_id"])).encode())
            if m.plan is not None:
                p = m.plan
                h.update(repr((p.backend, p.chunk_tokens, p.split_kv, p.padded_batch_size, p.grid, p.merge,
                               p.persistent, p.max_grid, p.splits, sorted(p.details.items()))).encode())
                h.update(repr([_item(w) for w in p.work_items]).encode())
            if m.sim is not None:
                r = m.sim
                h.update(repr((r.predicted_ns, r.makespan_ns, r.sm_busy_ns, r.sm_idle_fraction, r.tail_ns,
                               r.tail_intervals)).encode())
                h.update(repr([_item(w) for w in r.tail_items]).encode())
                h.update(repr([(g.sm, g.slot, g.start_ns, g.end_ns, _item(g.item)) for g in r.segments]).encode())
    h.update(json.dumps(snapshot(a), sort_keys=True, default=str).encode())
    h.update(repr([(f.id, f.severity.value, f.steps, f.saving_ns, sorted((k, repr(v)) for k, v in f.evidence.items()))
                   for f in a.findings]).encode())
    return h.hexdigest()[:16]


def main() -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from golden import CASES, snapshot  # type: ignore[import-not-found]

    from traceinsight.pipeline import analyze

    cases = {**CASES, "fa3_serving": FA3_SERVING}
    for name in sys.argv[1:] or list(cases):
        trace, meta, ncu = cases[name]
        t0 = time.perf_counter()
        _, (a,) = analyze([REPO / trace], meta=[REPO / m for m in meta], ncu=[REPO / n for n in ncu], cache=False)
        print(f"{name} {digest(a, snapshot)} {time.perf_counter() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
