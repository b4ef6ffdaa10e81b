"""Host ops read on demand from a Kineto trace (ingest/host_ops.py) equal what a full JSON parse finds."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from traceinsight.ingest.host_ops import read_kineto_ops


def _parsed(path: Path) -> list[tuple[str, int, int, int]]:
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    out = []
    for e in events:
        if e.get("cat") in ("cpu_op", "python_function") and e.get("ph") == "X":
            start = round(e["ts"] * 1000)
            out.append((e["name"], start, start + round(e["dur"] * 1000), int(e["tid"])))
    return out


def test_ops_in_windows_equal_a_full_parse(h200: Path) -> None:
    path = h200 / "flashinfer_decode_small.pt.trace.json.gz"
    every = _parsed(path)
    assert len(every) > 1000
    starts = sorted(s for _, s, _, _ in every)
    a, b = starts[len(starts) // 3], starts[2 * len(starts) // 3]
    windows = [(a - 1_000, a + 500_000), (b, b + 2_000_000)]
    want = sorted(op for op in every if any(op[1] < hi and lo < op[2] for lo, hi in windows))
    got = sorted((o.name, o.start_ns, o.end_ns, o.thread_id) for o in read_kineto_ops(path, windows))
    assert want and got == want
    # A floor on the duration, and no window at all.
    long = read_kineto_ops(path, windows, min_dur_ns=20_000)
    assert sorted((o.name, o.start_ns, o.end_ns, o.thread_id) for o in long) == [
        w for w in want if w[2] - w[1] >= 20_000]
    assert read_kineto_ops(path, []) == []
