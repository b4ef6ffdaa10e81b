"""Step times of a `loop` capture, read from the trace itself, next to the sidecar's truth. Stdlib only.

    python examples/loop/step_times.py TRACE SIDECAR [--all]

TRACE is a Kineto `.pt.trace.json(.gz)` (steps = the `ProfilerStep#N` user_annotation ranges) or an Nsight
Systems `.sqlite` export (steps = the NVTX push/pop ranges `step id=N`). A step's kernels are those launched from
inside its range (runtime and driver launch calls on the range's thread, matched to kernels by correlation id; a
cudaGraphLaunch names every kernel of its graph). Per step: wall = the range's length; gpu = summed kernel time;
attn = summed time of FlashInfer attention kernels (BatchDecode..., ...Prefill..., MergeStates);
idle = the part of the range with no kernel running (kernel intervals clipped to the range, merged).
Prints every step with an event (all steps with --all) next to the medians of the 20 event-free steps before it
(and the ratios to them) and of the 20 after it (a long join stays: the steps after it are slower), then the
medians per kind of step.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import sqlite3
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ATTENTION = ("BatchDecodeWithPagedKVCache", "PrefillWithKVCache", "BatchPrefillWithPagedKVCache", "MergeStates")
WINDOW = 20  # event-free steps taken on each side for the local baselines


@dataclass
class Step:
    name: str
    start_ns: int
    end_ns: int
    kernels: list[tuple[str, int, int]] = field(default_factory=list)  # (name, start_ns, end_ns)

    @property
    def wall_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def gpu_ms(self) -> float:
        return sum(e - s for _, s, e in self.kernels) / 1e6

    @property
    def attn_ms(self) -> float:
        return sum(e - s for n, s, e in self.kernels if any(a in n for a in ATTENTION)) / 1e6

    @property
    def idle_ms(self) -> float:
        spans = sorted((max(s, self.start_ns), min(e, self.end_ns)) for _, s, e in self.kernels)
        busy, cur_s, cur_e = 0, None, None
        for s, e in spans:
            if e <= s:
                continue
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    busy += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            busy += cur_e - cur_s
        return (self.end_ns - self.start_ns - busy) / 1e6


def _json(path: Path) -> Any:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def kineto_steps(path: Path) -> list[Step]:
    events = _json(path)["traceEvents"]
    kernels: dict[int, list[tuple[str, int, int]]] = {}
    for e in events:
        if e.get("cat") == "kernel":
            s = round(e["ts"] * 1000)
            kernels.setdefault(e["args"]["correlation"], []).append((e["name"], s, s + round(e["dur"] * 1000)))
    launches = sorted((round(e["ts"] * 1000), e["tid"], e["args"].get("correlation")) for e in events
                      if e.get("cat") in ("cuda_runtime", "cuda_driver"))  # cuBLAS launches with cuLaunchKernelEx
    stamps = [t for t, _, _ in launches]
    out = []
    for r in events:
        if r.get("cat") == "user_annotation" and r.get("name", "").startswith("ProfilerStep#"):
            s = round(r["ts"] * 1000)
            st = Step(r["name"], s, s + round(r["dur"] * 1000))
            lo, hi = bisect.bisect_left(stamps, st.start_ns), bisect.bisect_right(stamps, st.end_ns)
            st.kernels = [k for _, tid, c in launches[lo:hi] if tid == r["tid"] for k in kernels.get(c, [])]
            out.append(st)
    return sorted(out, key=lambda s: s.start_ns)


def nsys_steps(path: Path) -> list[Step]:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    kernels: dict[int, list[tuple[str, int, int]]] = {}
    for corr, name, s, e in con.execute("SELECT k.correlationId, n.value, k.start, k.end FROM "
                                        "CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds n ON n.id = k.demangledName"):
        kernels.setdefault(corr, []).append((name, s, e))
    runtime = sorted(con.execute("SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME"))
    stamps = [r[0] for r in runtime]
    out = []
    for name, s, e, tid in con.execute("SELECT coalesce(e.text, n.value), e.start, e.end, e.globalTid FROM "
                                       "NVTX_EVENTS e LEFT JOIN StringIds n ON n.id = e.textId "
                                       "WHERE e.eventType = 59"):
        if name and name.startswith("step id="):
            st = Step(name, s, e)
            lo, hi = bisect.bisect_left(stamps, s), bisect.bisect_right(stamps, e)
            st.kernels = [k for _, t, c in runtime[lo:hi] if t == tid for k in kernels.get(c, [])]
            out.append(st)
    return sorted(out, key=lambda s: s.start_ns)


def _matches(key: str, name: str) -> bool:  # traceinsight.ingest.sidecar.key_matches, restated (stdlib only)
    want = key.split()
    return bool(want) and set(want) <= set(name.split())


def table(trace: Path, sidecar: Path, every: bool = False) -> list[str]:
    steps = nsys_steps(trace) if trace.suffix == ".sqlite" else kineto_steps(trace)
    doc = _json(sidecar)
    rows = []
    for s in doc["steps"]:
        hit = [st for st in steps if _matches(s["key"], st.name)]
        if len(hit) != 1:
            raise SystemExit(f"{s['key']}: {len(hit)} ranges in {trace}")
        rows.append((s, hit[0]))
    clean = [i for i, (s, _) in enumerate(rows) if not s.get("truth", {}).get("event")]
    lines = [f"{trace.name}: {len(steps)} step ranges, {len(rows)} sidecar steps, "
             f"{sum(len(st.kernels) for st in steps)} kernels"]
    head = f"{'key':<16} {'event':<16} {'tokens':>7} {'ms':>6} {'B':>4} {'rows':>5} {'wall':>7} {'gpu':>7} " \
           f"{'attn':>7} {'idle':>7} | {'before':>7} {'attn':>6} {'x wall':>6} {'x attn':>6} | {'after':>7} {'attn':>6}"
    lines.append(head)

    def med(idx: list[int]) -> tuple[float, float]:
        if not idx:
            return float("nan"), float("nan")
        return (statistics.median(rows[k][1].wall_ms for k in idx), statistics.median(rows[k][1].attn_ms for k in idx))

    for i, (s, st) in enumerate(rows):
        t = s.get("truth") or {}
        if not (every or t.get("event")):
            continue
        j = bisect.bisect_left(clean, i)
        bw, ba = med(clean[max(0, j - WINDOW):j])  # the event-free steps before it
        aw, aa = med(clean[j + (clean[j:j + 1] == [i]):j + WINDOW])  # ... and after it
        lines.append(f"{s['key']:<16} {t.get('event') or '-':<16} {t.get('tokens') or '':>7} "
                     f"{t.get('ms') or '':>6} {s['batch_size']:>4} {sum(s.get('qo_lens') or [1]):>5} "
                     f"{st.wall_ms:7.2f} {st.gpu_ms:7.2f} {st.attn_ms:7.2f} {st.idle_ms:7.2f} | "
                     f"{bw:7.2f} {ba:6.2f} {st.wall_ms / bw:6.2f} {st.attn_ms / ba if ba else 0:6.2f} | "
                     f"{aw:7.2f} {aa:6.2f}")
    groups: dict[str, list[Step]] = {}
    for s, st in rows:
        t = s.get("truth") or {}
        groups.setdefault(t.get("event") or "none", []).append(st)
    lines.append("medians: " + "; ".join(
        f"{k} n={len(v)} wall {statistics.median(x.wall_ms for x in v):.2f} gpu "
        f"{statistics.median(x.gpu_ms for x in v):.2f} attn {statistics.median(x.attn_ms for x in v):.3f} ms"
        for k, v in groups.items()))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("sidecar", type=Path)
    ap.add_argument("--all", action="store_true", help="every step, not only those with an event")
    args = ap.parse_args()
    print("\n".join(table(args.trace, args.sidecar, args.all)))


if __name__ == "__main__":
    main()
