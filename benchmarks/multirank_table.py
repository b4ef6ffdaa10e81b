"""The tables of docs/MULTIRANK.md: public multi-rank Kineto traces analyzed as one run (`analyze rank0 rank1`):
ranks aligned (the n-th collective of a group matched on every rank), each collective's time and wait per rank and
its last-arriving rank, the per-step, per-rank table and the rank-straggler finding. Then the 2-rank run built from
HTA's real rank-0 trace (rank 1 a copy made late by 1.5 ms before its 10th collective, with a 2.5 s clock offset),
as tests/test_ranks.py builds it.

    .venv/bin/python benchmarks/multirank_table.py [RANK_FILE ...]   # Markdown on stdout

Without arguments: tests/data/foreign/hta/sampled_rank-{0,1}.json.gz. The files given are analyzed as one
`analyze` call would.
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from traceinsight.diagnose.run_rules import attach_runs
from traceinsight.model.ranks import RunAlignment
from traceinsight.pipeline import analyze
from traceinsight.units import fmt_ns

REPO = Path(__file__).resolve().parents[1]
HTA = REPO / "tests" / "data" / "foreign" / "hta"


def _runs(paths: list[Path]) -> tuple[list[RunAlignment], list[Any]]:
    db, analyses = analyze(paths, cache=False)
    runs = [a.cache["run"] for a in analyses if "run" in a.cache]
    distinct = list({id(r): r for r in runs}.values())
    if not distinct:  # analyze attaches runs only with diagnostics; say so rather than print nothing
        distinct = attach_runs(db, analyses)
    return distinct, analyses


def _tables(run: RunAlignment, analyses: list[Any]) -> list[str]:
    out = []
    ranks = run.rank_ids
    out.append("| rank | file | collectives | matched | unmatched | clock offset to rank "
               f"{ranks[0]} |")
    out.append("|---|---|---|---|---|---|")
    for r in run.ranks:
        out.append(f"| {r.rank} | `{Path(r.path).name}` | {run.counts[r.rank]} | {len(run.collectives)} | "
                   f"{run.unmatched[r.rank]} | {fmt_ns(run.offsets_ns[r.rank])} |")
    out.append("")
    out.append(f"World size {run.world_size}; every rank's collective sequence the same: "
               f"{'yes' if run.sequences_identical else 'no'}.")
    out.append("")
    out.append("| # | kind | group | elements | step | end skew | last rank | "
               + " | ".join(f"rank {r}: time / wait" for r in ranks) + " |")
    out.append("|---|---|---|---|---|---|---|" + "---|" * len(ranks))
    for c in run.collectives:
        skew = max(c.ends_ns) - min(c.ends_ns)
        out.append(f"| {c.index} | {c.kind} | {c.group} | {c.nelems if c.nelems is not None else '-'} | {c.step} | "
                   f"{fmt_ns(skew)} | {c.last_rank} | "
                   + " | ".join(f"{fmt_ns(d)} / {fmt_ns(w)}" for d, w in zip(c.durs_ns, c.waits_ns, strict=True))
                   + " |")
    out.append("")
    fams = sorted({f for s in run.rank_steps for f in s.busy_ns})
    out.append("| step | rank | span | " + " | ".join(fams) + " | in collectives | wait |")
    out.append("|---|---|---|" + "---|" * len(fams) + "---|---|")
    for s in run.rank_steps:
        out.append(f"| {s.step} | {s.rank} | {fmt_ns(s.span_ns)} | "
                   + " | ".join(fmt_ns(s.busy_ns.get(f)) if s.busy_ns.get(f) else "-" for f in fams)
                   + f" | {fmt_ns(s.collective_ns)} | {fmt_ns(s.wait_ns)} |")
    out.append("")
    first = next(a for a in analyses if a.trace_id == run.ranks[0].trace_id)
    found = [f for f in first.findings if f.id == "rank-straggler"]
    for f in found:
        ev = f.evidence
        out.append(f"rank-straggler ({f.severity.value}): straggler rank {ev['straggler_rank']}, last at "
                   f"{ev['late_collectives']} of {ev['collectives']} collectives in {', '.join(ev['steps'])}; "
                   f"the others waited {fmt_ns(ev['caused_wait_ns'])}; cause {ev['cause']} "
                   f"(+{fmt_ns(ev['cause_growth_ns'])} against the median other rank).")
    if not found:
        out.append("rank-straggler: passed.")
    return out


def _injected(tmp: Path, x_us: float = 1500.0, index: int = 9, offset_s: float = 2.5) -> list[Path]:
    """HTA's rank 0 of a 2-rank run and a rank 1 built from it: late by x_us before NCCL kernel `index` (the
    kernel before it grew), rank 0 waiting that long in it, rank 1's clock offset_s ahead."""
    src = json.loads(gzip.decompress((HTA / "nccl_data_rank0.json.gz").read_bytes()))

    def nccl(doc: dict[str, Any]) -> list[dict[str, Any]]:
        return sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"]),
                      key=lambda e: e["ts"])

    r0, r1 = json.loads(json.dumps(src)), json.loads(json.dumps(src))
    coll = nccl(r0)[index]
    end = coll["ts"] + coll["dur"]
    for e in r0["traceEvents"]:
        if e.get("cat") == "kernel" and e["ts"] >= end:
            e["ts"] += x_us
    coll["dur"] += x_us
    r1["distributedInfo"]["rank"] = 1
    kernels = sorted((e for e in r1["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    c1 = nccl(r1)[index]
    prev = [e for e in kernels if "nccl" not in e["name"] and e["ts"] + e["dur"] <= c1["ts"]][-1]
    cut = prev["ts"] + prev["dur"]
    for e in kernels:
        if e["ts"] >= cut:
            e["ts"] += x_us
    prev["dur"] += x_us
    for e in r1["traceEvents"]:
        if "ts" in e:
            e["ts"] += offset_s * 1e6
    paths = [tmp / "rank0.json.gz", tmp / "rank1_late.json.gz"]
    for doc, p in zip((r0, r1), paths, strict=True):
        p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return paths


def main(args: list[str]) -> None:
    paths = [Path(a) for a in args] or [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"]
    runs, analyses = _runs(paths)
    print(f"### {', '.join(p.name for p in paths)}\n")
    for run in runs:
        print("\n".join(_tables(run, analyses)))
    if args:
        return
    with tempfile.TemporaryDirectory() as tmp:
        print("\n### Constructed: HTA's rank 0 of a 2-rank run, rank 1 late by 1.5 ms before its collective 9 "
              "(a kernel grew), clock +2.5 s\n")
        runs, analyses = _runs(_injected(Path(tmp)))
        for run in runs:
            print("\n".join(_tables(run, analyses)))


if __name__ == "__main__":
    main(sys.argv[1:])
