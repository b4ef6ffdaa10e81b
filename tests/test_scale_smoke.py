"""The scale benchmark's input builders (benchmarks/ingest_scale.py) at a tiny size: the replicated inputs are
what they claim to be, and ingesting N copies gives exactly N times the original's rows, shifted. No timings.

Independent checks use the standard library only: `json.loads(..., parse_float=Decimal)` for Kineto (exact
microseconds) and `sqlite3` for the nsys export. The originals' numbers (48 kernels, 43 memops, 91 launches,
36 ranges and 32,863,845 ns of kernel time in the small trace; 70 kernels in the export) are those checked in
tests/test_kineto.py and by `sqlite3 flashinfer_decode.sqlite "select count(*) from CUPTI_ACTIVITY_KIND_KERNEL"`.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import sqlite3
import sys
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import REPO

from traceinsight.ingest import load

COPIES = 3
SMALL = "flashinfer_decode_small.pt.trace.json.gz"
NSYS = "flashinfer_decode.sqlite"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ingest_scale", REPO / "benchmarks" / "ingest_scale.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["ingest_scale"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_sizes_parse(bench: ModuleType) -> None:
    assert [bench.parse_size(s) for s in ("100M", "1G", "4G", "1M", "10M", "512")] == [
        100_000_000, 10**9, 4 * 10**9, 10**6, 10**7, 512]
    assert [bench.size_label(n) for n in (10**8, 10**9, 4 * 10**9, 10**7)] == ["100M", "1G", "4G", "10M"]


def test_kineto_copies(bench: ModuleType, h200: Path, tmp_path: Path) -> None:
    src = h200 / SMALL
    t = bench.kineto_template(src)
    out = bench.build_kineto(tmp_path / "k" / "rank0.pt.trace.json", COPIES, t)
    assert not list(out.parent.glob("*.partial"))

    orig = json.loads(gzip.decompress(src.read_bytes()), parse_float=Decimal)
    rep = json.loads(out.read_bytes(), parse_float=Decimal)
    n = len(orig["traceEvents"])
    assert len(rep["traceEvents"]) == COPIES * n
    assert {k: v for k, v in rep.items() if k != "traceEvents"} == {k: v for k, v in orig.items() if k != "traceEvents"}

    def kernels(events: list[dict]) -> list[dict]:
        return [e for e in events if e.get("cat") == "kernel"]

    assert len(kernels(rep["traceEvents"])) == COPIES * len(kernels(orig["traceEvents"])) == COPIES * 48
    for k in range(COPIES):
        copy = rep["traceEvents"][k * n : (k + 1) * n]
        for a, b in zip(orig["traceEvents"], copy, strict=True):
            if "ts" in a:  # every timestamp shifted by k periods, to the exact microsecond text
                assert b["ts"] - a["ts"] == k * t.period_us
            if "correlation" in a.get("args", {}):
                assert b["args"]["correlation"] - a["args"]["correlation"] == k * t.id_period
            rest = {key: v for key, v in b.items() if key not in ("ts", "args", "id")}
            assert rest == {key: v for key, v in a.items() if key not in ("ts", "args", "id")}
    # copies do not overlap in time
    timed = [e for e in orig["traceEvents"] if "ts" in e]
    assert max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) < t.period_us

    db, ids = load([out], cache=False)
    single, sid = load([src], cache=False)
    for table in ("kernels", "memops", "launches", "ranges"):
        got = db.rows(f"SELECT count(*) AS n FROM {table}")[0]["n"]
        assert got == COPIES * single.rows(f"SELECT count(*) AS n FROM {table}")[0]["n"], table
    assert db.rows("SELECT sum(dur_ns) AS d FROM kernels")[0]["d"] == COPIES * 32_863_845
    base = [r["start_ns"] for r in single.rows("SELECT start_ns FROM kernels ORDER BY kernel_id")]
    starts = [r["start_ns"] for r in db.rows("SELECT start_ns FROM kernels ORDER BY kernel_id")]
    for k in range(COPIES):
        assert starts[k * 48 : (k + 1) * 48] == [s + k * t.period_us * 1000 for s in base]
    # every kernel still finds its launch in its own copy (correlation ids shifted together)
    assert db.rows("SELECT count(*) AS n FROM kernels k JOIN launches l USING (correlation_id)")[0]["n"] == COPIES * 48


def test_nsys_copies(bench: ModuleType, h200: Path, tmp_path: Path) -> None:
    src = h200 / NSYS
    shape = bench.nsys_shape(src)
    assert shape.kernels == 70
    assert bench.nsys_copies_for(1_000_000, shape) == 14_286  # 1,000,020 kernel rows
    out = bench.build_nsys(tmp_path / "x.sqlite", COPIES, src)

    a = sqlite3.connect(f"file:{src}?mode=ro&immutable=1", uri=True)
    b = sqlite3.connect(out)
    for table in bench.NSYS_TABLES:
        if not a.execute("SELECT count(*) FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]:
            continue
        n = a.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        m = b.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        assert m == COPIES * n, table
        lo_a, hi_a = a.execute(f"SELECT min(start), max(start) FROM {table}").fetchone()
        lo_b, hi_b = b.execute(f"SELECT min(start), max(start) FROM {table}").fetchone()
        assert (lo_b, hi_b) == (lo_a, hi_a + (COPIES - 1) * shape.period_ns), table
    untouched = "SELECT count(*) FROM StringIds"
    assert a.execute(untouched).fetchone() == b.execute(untouched).fetchone()
    b.close()
    a.close()

    db, _ = load([out], cache=False)
    single, _ = load([src], cache=False)
    for table in ("kernels", "memops", "launches", "ranges"):
        got = db.rows(f"SELECT count(*) AS n FROM {table}")[0]["n"]
        assert got == COPIES * single.rows(f"SELECT count(*) AS n FROM {table}")[0]["n"], table
    assert db.rows("SELECT count(*) AS n FROM kernels")[0]["n"] == COPIES * 70
    base = single.rows("SELECT sum(dur_ns) AS d, min(start_ns) AS s FROM kernels")[0]
    got = db.rows("SELECT sum(dur_ns) AS d, min(start_ns) AS s, max(start_ns) AS e FROM kernels")[0]
    assert (got["d"], got["s"]) == (COPIES * base["d"], base["s"])
    last = single.rows("SELECT max(start_ns) AS e FROM kernels")[0]["e"]
    assert got["e"] == last + (COPIES - 1) * shape.period_ns


def test_many_recurring_spikes_fold_into_bounded_findings(bench: ModuleType, h200: Path, tmp_path: Path) -> None:
    """40 copies of the real export: the split-KV-off step of each copy recurs as a latency spike, dozens of
    incidents. At most MAX_INCIDENTS stay findings of their own, the rest fold per cause, and nothing is lost:
    the incidents, their steps, their excess time and the worst severity add up to the unfolded findings'."""
    from traceinsight.diagnose.finding import Severity
    from traceinsight.diagnose.rules import latency_spike
    from traceinsight.pipeline import analyze

    out = bench.build_nsys(tmp_path / "x.sqlite", 40, h200 / NSYS)
    _, (every,) = analyze([out], cache=False, limits={"latency-spike.MAX_INCIDENTS": 10**6})
    _, (folded,) = analyze([out], cache=False)
    def incidents(a: Any) -> list[Any]:  # not the finding that groups a recurring cause's incidents (issue 27)
        return [f for f in a.findings if f.id == latency_spike.ID and not f.evidence.get("group")]

    spikes = incidents(every)
    kept = [f for f in incidents(folded) if not f.evidence.get("folded")]
    rolled = [f for f in incidents(folded) if f.evidence.get("folded")]
    assert len(spikes) > latency_spike.MAX_INCIDENTS
    assert len(kept) == latency_spike.MAX_INCIDENTS and 1 <= len(rolled) <= len(latency_spike.ATTENTION_CAUSES) + 1
    assert len(kept) + sum(f.evidence["incidents"] for f in rolled) == len(spikes)
    assert sorted(s for f in kept + rolled for s in f.steps) == sorted(s for f in spikes for s in f.steps)
    assert sum(f.saving_ns for f in kept + rolled) == sum(f.saving_ns for f in spikes)
    worst = min((f.severity for f in spikes), key=lambda s: s.rank)
    assert min((f.severity for f in kept + rolled), key=lambda s: s.rank) == worst == Severity.CRITICAL
    # The kept ones are the incidents with the most excess time.
    cut = sorted((f.saving_ns for f in spikes), reverse=True)[latency_spike.MAX_INCIDENTS - 1]
    assert all(f.saving_ns >= cut for f in kept)
    # Summaries stay one readable line, however many steps they cover.
    assert all(len(f.summary) < 400 for f in folded.findings)
