"""A distributed run as one story: its ranks' traces recognised, their collectives matched, clocks aligned, and
each collective's time split into waiting for the last rank and the transfer itself.

- Runs (`find_runs`): traces whose header names a rank of a distributed run (Kineto `distributedInfo`: rank,
  world_size, backend, process groups; `traces` columns of the same names) are one run when they agree on world
  size and backend, hold distinct ranks and overlap in time or in step names. (Process groups are not compared:
  a rank's `pg_config` may list only the groups it created or joined.)
- Collectives: the communication kernels of each rank (family 'communication': NCCL/RCCL, custom all-reduce).
  A collective's group is its process group as torch.distributed recorded it on the kernel ('Process Group Name',
  stored at ingest in `collectives`), else its stream's order among the rank's communication streams; its kind is the
  recorded 'Collective name', else the one in the kernel's name (ncclKernel_AllReduce_... -> allreduce). The n-th
  collective of a (group, kind) on one rank is the n-th on every rank (`Seq` numbers, when recorded, say which).
- Clocks: ranks on different hosts have different clocks. A collective ends at about the same time on every rank
  (each rank's kernel finishes when the last piece of data arrives), so each rank's offset to the reference rank
  (the lowest) is the end difference most of its collectives agree on (`OFFSET_AGREE_NS`), refined as their
  median; times are then on the reference rank's clock.
- Matching: each rank's sequence of a (group, kind) is merged with the reference's in time order, a pair being
  one collective when their corrected ends agree within `match_tolerance_ns`. A complete trace gives the n-th
  with the n-th; a trace that lost events (sampled traces, a profiler that dropped records) leaves the lost
  collective unmatched instead of shifting every later pair.
- Wait: on each rank, wait = (the last rank's arrival - this rank's arrival), bounded by the kernel's duration;
  the rest of the kernel is the transfer. The last-arriving rank waits for nobody.
- Why a rank arrived late: between the previous collective's end and this collective's start each rank ran its
  own work; that interval is split into kernel time by family and GPU idle ('host': the GPU waited for the
  host or a synchronisation), and the straggler's parts are compared with the other ranks' (the rank-straggler
  rule, `traceinsight.diagnose.rules.rank_straggler`).
Times in ns.
"""

from __future__ import annotations

import bisect
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from traceinsight.ingest.collective_args import CollectiveArgs
from traceinsight.ingest.store import TraceDB
from traceinsight.queries import sql

# Two ranks' ends of one collective agree within this once clocks are aligned (ns): the offset vote's bin.
OFFSET_AGREE_NS = 20_000
# Pairs compared in the offset vote: a rank's n-th collective of a (group, kind) with the reference's n-th and
# this many either side (events lost by one rank shift the sequence a little).
OFFSET_VOTE_REACH = 3
# Two ranks' kernels are one collective when their corrected ends agree within the larger of this (ns) ...
MATCH_TOLERANCE_MIN_NS = 50_000
# ... and this share of the shorter kernel ...
MATCH_TOLERANCE_FRACTION = 0.05
# ... but never more than this share of the time to the reference's neighbouring collective of the same kind.
MATCH_NEIGHBOUR_FRACTION = 0.45
# The component name of GPU idle time between two collectives (the GPU waited for the host or a sync).
HOST = "host"

_KIND = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+?)_|(?i:(all_?reduce|all_?gather|reduce_?scatter|"
                   r"all_?to_?all|broadcast|send_?recv|cross_device_reduce))")


@dataclass(frozen=True)
class RankFile:
    """One rank's trace: its trace id in the database, file, rank and the run it says it belongs to."""

    trace_id: int
    path: str
    rank: int
    world_size: int
    backend: str | None
    process_groups: str | None
    start_ns: int | None
    end_ns: int | None


@dataclass(frozen=True)
class Collective:
    """One collective matched on every rank of the run. Per-rank tuples are in the run's rank order; times on the
    reference rank's clock. wait: the part of each rank's kernel spent waiting for the last rank to arrive;
    before: per rank, what it ran between the previous collective's end and this one's start ({component: ns},
    'host' for GPU idle)."""

    index: int
    group: str
    kind: str
    seq: int
    nelems: int | None
    dtype: str | None
    step: str
    starts_ns: tuple[int, ...]
    ends_ns: tuple[int, ...]
    waits_ns: tuple[int, ...]
    last_rank: int
    before: tuple[dict[str, int], ...]

    @property
    def durs_ns(self) -> tuple[int, ...]:
        return tuple(e - s for s, e in zip(self.starts_ns, self.ends_ns, strict=True))

    @property
    def spread_ns(self) -> int:
        """Last arrival minus first arrival."""
        return max(self.starts_ns) - min(self.starts_ns)


@dataclass(frozen=True)
class RankStep:
    """One step on one rank: kernel time by family of the kernels launched in it, time inside collectives, and
    the part of it spent waiting for other ranks (ns)."""

    step: str
    rank: int
    span_ns: int
    busy_ns: dict[str, int]
    collective_ns: int
    wait_ns: int


@dataclass
class RunAlignment:
    """A multi-rank run aligned: its ranks (rank order), each rank's clock offset to the reference rank (subtract
    to get reference time), the collectives matched on every rank, per rank how many of its collectives matched
    nothing, the steps matched across ranks and the per-step, per-rank table."""

    ranks: list[RankFile]
    world_size: int
    offsets_ns: dict[int, int]
    collectives: list[Collective]
    counts: dict[int, int]
    unmatched: dict[int, int]
    sequences_identical: bool
    steps: list[str]
    rank_steps: list[RankStep] = field(default_factory=list)
    steps_from: str = "ProfilerStep"

    @property
    def rank_ids(self) -> list[int]:
        return [r.rank for r in self.ranks]

    def to_json(self) -> dict[str, Any]:
        """The run as schema `traceinsight.analysis/1` adds it to each rank's document (key "run")."""
        return {
            "world_size": self.world_size,
            "ranks": [{"rank": r.rank, "path": r.path, "trace_id": r.trace_id,
                       "clock_offset_ns": self.offsets_ns[r.rank], "collectives": self.counts[r.rank],
                       "unmatched_collectives": self.unmatched[r.rank]} for r in self.ranks],
            "collectives_matched": len(self.collectives),
            "sequences_identical": self.sequences_identical,
            "steps": self.steps,
            "steps_from": self.steps_from,
            "rank_steps": [{"step": s.step, "rank": s.rank, "span_ns": s.span_ns, "busy_ns": s.busy_ns,
                            "collective_ns": s.collective_ns, "wait_ns": s.wait_ns} for s in self.rank_steps],
            "collectives": [collective_json(c, self.rank_ids) for c in self.collectives],
        }


def collective_json(c: Collective, ranks: list[int]) -> dict[str, Any]:
    return {"index": c.index, "group": c.group, "kind": c.kind, "seq": c.seq, "nelems": c.nelems,
            "dtype": c.dtype, "step": c.step, "last_rank": c.last_rank, "spread_ns": c.spread_ns,
            "ranks": [{"rank": r, "start_ns": s, "dur_ns": e - s, "wait_ns": w}
                      for r, s, e, w in zip(ranks, c.starts_ns, c.ends_ns, c.waits_ns, strict=True)]}


# ------------------------------------------------------------------ runs
def find_runs(db: TraceDB, trace_ids: list[int]) -> list[list[RankFile]]:
    """The multi-rank runs among these traces: lists of two or more ranks' files, in rank order. Traces without a
    rank, or alone in their run, are in none."""
    if not trace_ids:
        return []
    rows = db.rows("SELECT trace_id, path, rank, world_size, dist_backend, process_groups, start_ns, end_ns "
                   "FROM traces WHERE list_contains($ids, trace_id) AND rank IS NOT NULL AND world_size > 1 "
                   "ORDER BY trace_id", {"ids": trace_ids})
    files = [RankFile(r["trace_id"], r["path"], r["rank"], r["world_size"], r["dist_backend"], r["process_groups"],
                      r["start_ns"], r["end_ns"]) for r in rows]
    names = {f.trace_id: {s["name"] for s in db.rows(sql("rank_steps"), {"trace": f.trace_id})} for f in files}
    runs: list[list[RankFile]] = []
    for f in files:
        for run in runs:
            head = run[0]
            if ((head.world_size, head.backend) == (f.world_size, f.backend)
                    and all(g.rank != f.rank for g in run)
                    and any(_overlap(g, f) or names[g.trace_id] & names[f.trace_id] for g in run)):
                run.append(f)
                break
        else:
            runs.append([f])
    return [sorted(run, key=lambda f: f.rank) for run in runs if len(run) > 1]


def _overlap(a: RankFile, b: RankFile) -> bool:
    if None in (a.start_ns, a.end_ns, b.start_ns, b.end_ns):
        return False
    return bool(a.start_ns < b.end_ns and b.start_ns < a.end_ns)  # type: ignore[operator]


# ------------------------------------------------------------------ one rank
@dataclass
class _Call:
    """One collective kernel on one rank (its own clock)."""

    kernel_id: int
    group: str
    kind: str
    start: int
    end: int
    launch: int | None
    args: CollectiveArgs | None


@dataclass
class _Rank:
    file: RankFile
    calls: dict[tuple[str, str], list[_Call]]
    starts: np.ndarray  # every kernel's start (ns), in start order
    ends: np.ndarray
    family_names: list[str]  # the distinct families; `families` holds each kernel's index into it
    families: np.ndarray
    launch: np.ndarray  # launch call start (ns), -1 when unknown
    steps: list[tuple[str, int, int]]  # (name, host start, host end)
    max_dur: int  # the longest kernel (ns): how far back a kernel overlapping a time may start


def _kind(name: str, args: CollectiveArgs | None) -> str:
    if args is not None and args.name:
        return args.name.lower().replace("_", "")
    m = _KIND.search(name)
    if m is None:
        return "collective"
    return (m.group(1) or m.group(2)).lower().replace("_", "")


def _read_rank(db: TraceDB, f: RankFile) -> _Rank:
    cols = db.sql(sql("rank_kernels"), {"trace": f.trace_id}).fetchnumpy()
    args = {r[0]: CollectiveArgs(*r[1:]) for r in db.sql(sql("collective_args"), {"trace": f.trace_id}).fetchall()}
    fam = np.array(["other" if x is None else str(x) for x in cols["family"].tolist()], dtype=str)
    names, codes = np.unique(fam, return_inverse=True)
    starts = np.asarray(cols["start_ns"], dtype=np.int64)
    ends = np.asarray(cols["end_ns"], dtype=np.int64)
    launch = np.ma.filled(np.ma.asarray(cols["launch_ns"]).astype(np.int64), -1)
    streams: dict[Any, int] = {}
    calls: dict[tuple[str, str], list[_Call]] = {}
    for i in np.nonzero(fam == "communication")[0].tolist():
        corr = cols["correlation_id"][i]
        a = args.get(int(corr)) if corr is not np.ma.masked else None
        if a is not None and a.group_name:
            group = a.group_name
        else:
            stream = cols["stream_id"][i]
            group = f"stream#{streams.setdefault(None if stream is np.ma.masked else int(stream), len(streams))}"
        kind = _kind(str(cols["name"][i]), a)
        calls.setdefault((group, kind), []).append(
            _Call(int(cols["kernel_id"][i]), group, kind, int(starts[i]), int(ends[i]),
                  None if launch[i] < 0 else int(launch[i]), a))
    steps = [(s["name"], s["start_ns"], s["end_ns"]) for s in db.rows(sql("rank_steps"), {"trace": f.trace_id})]
    return _Rank(f, calls, starts, ends, [str(n) for n in names], np.asarray(codes, dtype=np.int64), launch, steps,
                 int((ends - starts).max()) if len(starts) else 0)


# ------------------------------------------------------------------ clocks and matching
def estimate_offset(ref: dict[tuple[str, str], list[_Call]], other: dict[tuple[str, str], list[_Call]]) -> int:
    """The clock offset of `other` to `ref` (ns; subtract it from `other`'s times): the end difference that most
    pairs of same-kind collectives near each other in sequence agree on (within OFFSET_AGREE_NS), their median.
    0 when the two share no collective kind."""
    diffs: list[int] = []
    for key, mine in ref.items():
        theirs = other.get(key, [])
        for i, c in enumerate(mine):
            for j in range(max(0, i - OFFSET_VOTE_REACH), min(len(theirs), i + OFFSET_VOTE_REACH + 1)):
                diffs.append(theirs[j].end - c.end)
    if not diffs:
        return 0
    diffs.sort()
    best_lo, best_n = 0, 0
    hi = 0
    for lo in range(len(diffs)):
        while hi < len(diffs) and diffs[hi] - diffs[lo] <= 2 * OFFSET_AGREE_NS:
            hi += 1
        if hi - lo > best_n:
            best_lo, best_n = lo, hi - lo
    return int(statistics.median(diffs[best_lo:best_lo + best_n]))


def match_tolerance_ns(ref: list[_Call], i: int, dur_ns: int) -> float:
    """How far apart two ranks' corrected ends of one collective may be: the larger of MATCH_TOLERANCE_MIN_NS
    and MATCH_TOLERANCE_FRACTION of the shorter kernel, capped at MATCH_NEIGHBOUR_FRACTION of the time to the
    reference's neighbouring collective of the same kind (never wide enough to take the neighbour)."""
    tol = max(MATCH_TOLERANCE_MIN_NS, MATCH_TOLERANCE_FRACTION * dur_ns)
    gaps = [abs(ref[i].end - ref[i - 1].end)] if i > 0 else []
    if i + 1 < len(ref):
        gaps.append(abs(ref[i + 1].end - ref[i].end))
    if gaps:
        tol = min(tol, MATCH_NEIGHBOUR_FRACTION * max(1, min(gaps)))
    return tol


def match_sequence(ref: list[_Call], other: list[_Call], offset: int) -> dict[int, int]:
    """Which of `other`'s calls is each of `ref`'s (index -> index): by sequence number when both record one,
    else by merging the two in time order, a pair matching when their corrected ends agree within
    `match_tolerance_ns`."""
    if ref and other and all(c.args is not None and c.args.seq is not None for c in ref + other):
        by_seq = {c.args.seq: j for j, c in enumerate(other) if c.args is not None}
        return {i: by_seq[c.args.seq] for i, c in enumerate(ref) if c.args is not None and c.args.seq in by_seq}
    out: dict[int, int] = {}
    i = j = 0
    while i < len(ref) and j < len(other):
        a, b = ref[i], other[j]
        d = (b.end - offset) - a.end
        if abs(d) <= match_tolerance_ns(ref, i, min(a.end - a.start, b.end - b.start)):
            out[i] = j
            i += 1
            j += 1
        elif d < 0:
            j += 1  # other's call ends first: the reference lost it (or it is not this one)
        else:
            i += 1
    return out


# ------------------------------------------------------------------ the run
def align_run(db: TraceDB, files: list[RankFile]) -> RunAlignment:
    """Align the ranks of one run (`find_runs`): offsets, matched collectives with wait and last-arriving rank,
    the steps across ranks and the per-step, per-rank table."""
    ranks = [_read_rank(db, f) for f in files]
    ref = ranks[0]
    offsets = {ref.file.rank: 0}
    for r in ranks[1:]:
        offsets[r.file.rank] = estimate_offset(ref.calls, r.calls)
    matched: list[tuple[tuple[str, str], int, list[_Call]]] = []
    for key, mine in ref.calls.items():
        maps = [match_sequence(mine, r.calls.get(key, []), offsets[r.file.rank]) for r in ranks[1:]]
        for i, c in enumerate(mine):
            if all(i in m for m in maps):
                matched.append((key, i, [c] + [r.calls[key][m[i]] for r, m in zip(ranks[1:], maps, strict=True)]))
    matched.sort(key=lambda t: t[2][0].start)
    counts = {r.file.rank: sum(len(v) for v in r.calls.values()) for r in ranks}
    unmatched = {r.file.rank: counts[r.file.rank] - len(matched) for r in ranks}
    identical = all(v == 0 for v in unmatched.values()) and len({counts[r] for r in counts}) == 1
    steps, step_of = _steps(ranks)
    prev_end: list[int | None] = [None] * len(ranks)
    collectives: list[Collective] = []
    for n, (key, seq, calls) in enumerate(matched):
        starts = tuple(c.start - offsets[r.file.rank] for c, r in zip(calls, ranks, strict=True))
        ends = tuple(c.end - offsets[r.file.rank] for c, r in zip(calls, ranks, strict=True))
        last = max(starts)
        waits = tuple(min(last - s, e - s) for s, e in zip(starts, ends, strict=True))
        last_pos = starts.index(last)
        before = []
        for k, (r, c) in enumerate(zip(ranks, calls, strict=True)):
            lo = prev_end[k]
            if lo is None:
                lo = _step_gpu_start(r, c.launch if c.launch is not None else c.start, c.start)
            before.append(_components(r, lo, c.start))
            prev_end[k] = c.end
        a = calls[0].args
        collectives.append(Collective(
            n, key[0], key[1], seq, a.in_nelems if a else None, a.dtype if a else None,
            step_of(ranks[0], calls[0]), starts, ends, waits, ranks[last_pos].file.rank, tuple(before)))
    run = RunAlignment([r.file for r in ranks], files[0].world_size, offsets, collectives, counts, unmatched,
                       identical, [s for s in steps])
    run.steps_from = "ProfilerStep" if any(r.steps for r in ranks) else "whole trace"
    run.rank_steps = _rank_steps(ranks, steps, collectives)
    return run


def _steps(ranks: list[_Rank]) -> tuple[list[str], Any]:
    """The steps of the run (names, in the reference's order) and a function (rank, call) -> the step a
    collective call of that rank belongs to (the host step range holding its launch, else its start). Steps are
    matched by name (ProfilerStep#N) when every rank has the reference's names, else by order."""
    ref_names = [s[0] for s in ranks[0].steps]
    by_name = all({s[0] for s in r.steps} >= set(ref_names) for r in ranks)

    def name_of(r: _Rank, at: int) -> str:
        if not r.steps:
            return "all"
        i = bisect.bisect_right([s[1] for s in r.steps], at) - 1
        if i < 0 or at >= r.steps[i][2]:
            return "outside steps"
        if by_name or r is ranks[0]:
            return r.steps[i][0]
        return ref_names[i] if i < len(ref_names) else r.steps[i][0]

    def step_of(r: _Rank, c: _Call) -> str:
        return name_of(r, c.launch if c.launch is not None else c.start)

    return (ref_names or ["all"]), step_of


def _step_gpu_start(r: _Rank, at: int, fallback: int) -> int:
    """The GPU start of the first kernel launched in rank r's own step range holding time `at` (a collective's
    launch: the start of that step's first interval), else `fallback`."""
    for _name, lo, hi in r.steps:
        if lo <= at < hi:
            idx = np.nonzero((r.launch >= lo) & (r.launch < hi))[0]
            return int(r.starts[idx].min()) if len(idx) else fallback
    return fallback


def _components(r: _Rank, lo: int, hi: int) -> dict[str, int]:
    """Rank r's work in [lo, hi) of its own clock: kernel time by family (clipped to the interval; collective
    kernels on other streams count as 'communication') and GPU idle ('host': the interval less the union of its
    kernels)."""
    if hi <= lo:
        return {}
    i0 = int(np.searchsorted(r.starts, lo - r.max_dur, side="left"))
    i1 = int(np.searchsorted(r.starts, hi, side="left"))
    a = np.maximum(r.starts[i0:i1], lo)
    b = np.minimum(r.ends[i0:i1], hi)
    keep = b > a
    a, b, fam = a[keep], b[keep], r.families[i0:i1][keep]
    sums = np.bincount(fam, weights=b - a, minlength=len(r.family_names))
    out = {r.family_names[i]: int(v) for i, v in enumerate(sums.tolist()) if v}
    busy = 0
    if len(a):
        order = np.argsort(a, kind="stable")  # clipping at lo can reorder the starts
        a, b = a[order], b[order]
        reach = np.maximum.accumulate(b)
        new = np.empty(len(a), dtype=bool)
        new[0] = True
        new[1:] = a[1:] > reach[:-1]  # a kernel starting after everything before it ended opens a new span
        seg_start = a[new]
        seg_end = np.maximum.reduceat(b, np.nonzero(new)[0])
        busy = int((seg_end - seg_start).sum())
    out[HOST] = (hi - lo) - busy
    return out


def _rank_steps(ranks: list[_Rank], steps: list[str], collectives: list[Collective]) -> list[RankStep]:
    by_step: dict[str, list[Collective]] = {}
    for c in collectives:
        by_step.setdefault(c.step, []).append(c)
    out: list[RankStep] = []
    for k, r in enumerate(ranks):
        ranges = {n: (a, b) for n, a, b in r.steps}
        durs = r.ends - r.starts
        for name in steps:
            if name in ranges:
                lo, hi = ranges[name]
                sel = (r.launch >= lo) & (r.launch < hi)
                sel |= (r.launch < 0) & (r.starts >= lo) & (r.starts < hi)
                span = hi - lo
            else:
                sel = np.ones(len(r.starts), dtype=bool)
                span = int(r.ends.max() - r.starts.min()) if len(r.starts) else 0
            sums = np.bincount(r.families[sel], weights=durs[sel], minlength=len(r.family_names))
            busy = {r.family_names[i]: int(v) for i, v in enumerate(sums.tolist()) if v}
            mine = by_step.get(name, [])
            out.append(RankStep(name, r.file.rank, span, dict(sorted(busy.items())),
                                sum(c.ends_ns[k] - c.starts_ns[k] for c in mine), sum(c.waits_ns[k] for c in mine)))
    return out
