"""The findings on the timeline users know: a Chrome trace (JSON Trace Event Format) that Perfetto UI and
chrome://tracing open offline, holding the trace's GPU kernels (one track per device and stream), the decode
steps (their wall time on a track of their own) and one slice per root cause over the steps it concerns, on a
"findings" track per root cause, its summary, saving, remedy and evidence in the slice's args.

Times: the format counts microseconds (floats keep the nanoseconds); pid/tid name the tracks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from traceinsight.diagnose.context import TraceAnalysis
    from traceinsight.ingest.store import TraceDB

GPU_PID = 1
STEPS_PID = 2
FINDINGS_PID = 3


def _us(ns: int) -> float:
    return ns / 1000.0


def _dur_us(start_ns: int, end_ns: int) -> float:
    """end - start in us, as the difference of the two timestamps in us: exact (Sterbenz), so that ts + dur is the
    end's timestamp to the bit, and an event ending where the next begins does not overlap it (at 5e12 us, a float
    holds the us to about 1 ns, and start/1000 + dur/1000 can round past the next start)."""
    return _us(end_ns) - _us(start_ns)


def _meta(pid: int, name: str, tid: int | None = None, thread: str | None = None) -> dict[str, Any]:
    if tid is None:
        return {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}}
    return {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": thread}}


def _runs(steps: list[int]) -> list[tuple[int, int]]:
    """Consecutive step indexes as (first, last) runs."""
    out: list[tuple[int, int]] = []
    for i in sorted(set(steps)):
        if out and i == out[-1][1] + 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


class _Track:
    """Complete events of each track, given in start order, emitted properly nested, as the format's viewers need
    them (one slice inside another, or after it): an event that starts inside the one before it on its track and
    ends after it (Kineto's kernel timestamps on one stream overlap by a few hundred ns; a step's wall time may
    reach 1 ns into the next step's) is cut to end where the next begins, its own duration kept in its args
    (`trace_dur_us`). Each event waits for the next one on its track before it is written."""

    def __init__(self) -> None:
        self.pending: dict[tuple[int, int], tuple[dict[str, Any], int, int]] = {}

    def add(self, event: dict[str, Any], start_ns: int, end_ns: int) -> Iterator[dict[str, Any]]:
        key = (event["pid"], event["tid"])
        before = self.pending.get(key)
        if before is not None:
            e, s0, e0 = before
            if s0 <= start_ns < e0 < end_ns:
                e["args"]["trace_dur_us"] = e["dur"]
                e["dur"] = _dur_us(s0, start_ns)
            yield e
        self.pending[key] = (event, start_ns, end_ns)

    def flush(self) -> Iterator[dict[str, Any]]:
        for e, _, _ in self.pending.values():
            yield e
        self.pending.clear()


def events(db: TraceDB, a: TraceAnalysis, doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The trace events: GPU kernels, steps, and one slice per root cause (read from `a`'s document `doc`) and run
    of consecutive steps."""
    from traceinsight.report.sections import finding_groups

    yield _meta(GPU_PID, f"GPU {(a.gpu or {}).get('name') or ''}".strip())
    yield _meta(STEPS_PID, "decode steps")
    yield _meta(FINDINGS_PID, "traceinsight findings")
    streams: set[tuple[int, int]] = set()
    rows = db.con.execute(
        "SELECT name, start_ns, dur_ns, coalesce(device_id, 0), coalesce(stream_id, 0), grid_x, grid_y, grid_z "
        "FROM kernels WHERE trace_id = ? ORDER BY start_ns", [a.trace_id]).fetchall()
    labels = {k["name"]: k for k in a.kernels}
    track = _Track()
    for name, start, dur, device, stream, gx, gy, gz in rows:
        tid = int(device) * 1_000_000 + int(stream)
        if (device, stream) not in streams:
            streams.add((device, stream))
            yield _meta(GPU_PID, "", tid, f"device {device} stream {stream}")
        k = labels.get(name) or {}
        yield from track.add({"ph": "X", "pid": GPU_PID, "tid": tid, "name": k.get("kernel") or name,
                              "cat": k.get("family") or "kernel", "ts": _us(start), "dur": _dur_us(start, start + dur),
                              "args": {"name": name, "grid": [gx, gy, gz], "backend": k.get("backend")}},
                             int(start), int(start) + int(dur))
    yield from track.flush()
    yield _meta(STEPS_PID, "", 1, "steps")
    by_index = a.steps_by_index()
    for s in sorted(a.steps, key=lambda s: (s.breakdown.start_ns if s.breakdown is not None else s.start_ns)):
        start = s.breakdown.start_ns if s.breakdown is not None else s.start_ns
        yield from track.add({"ph": "X", "pid": STEPS_PID, "tid": 1, "name": s.name, "cat": "step",
                              "ts": _us(start), "dur": _dur_us(start, start + s.wall_ns),
                              "args": {"index": s.index, "attention_ns": s.attention_ns, "split_kv": s.split_kv}},
                             start, start + s.wall_ns)
    yield from track.flush()
    for n, g in enumerate(finding_groups(doc), 1):
        yield _meta(FINDINGS_PID, "", n, f"{g.severity.upper()} {g.id}")
        first = g.findings[0]
        args = {"summary": g.summary, "severity": g.severity, "saving_ns": g.saving_ns, "share": g.share(doc),
                "remedy": first.get("remedy"), "also": g.evidence_text(), "steps": len(g.steps),
                "explanation": first.get("explanation")}
        own = sorted({i for f in g.findings for i in f.get("steps") or []} or set(g.steps))
        runs = _runs([i for i in own if i in by_index])
        if not runs:  # a finding about the whole trace: one slice over every step
            if a.steps:
                runs = [(a.steps[0].index, a.steps[-1].index)]
            else:
                continue
        for lo, hi in runs:
            s0, s1 = by_index[lo], by_index[hi]
            t0 = s0.breakdown.start_ns if s0.breakdown is not None else s0.start_ns
            t1 = s1.breakdown.end_ns if s1.breakdown is not None else s1.end_ns
            yield {"ph": "X", "pid": FINDINGS_PID, "tid": n, "name": g.id, "cat": f"finding,{g.severity}",
                   "ts": _us(t0), "dur": _dur_us(t0, max(t1, t0 + 1)),
                   "args": {**args, "first_step": lo, "last_step": hi}}


def write(db: TraceDB, a: TraceAnalysis, doc: dict[str, Any], out: IO[bytes]) -> int:
    """Write the Chrome trace of `a` (its document `doc`: `report.saved`) to `out` ({"traceEvents": [...]}, one
    event per line); returns how many events were written."""
    out.write(b'{"displayTimeUnit":"ns","otherData":{"generator":"traceinsight","trace":'
              + orjson.dumps(a.path) + b'},"traceEvents":[\n')
    n = 0
    for e in events(db, a, doc):
        out.write((b",\n" if n else b"") + orjson.dumps(e))
        n += 1
    out.write(b"\n]}\n")
    return n
