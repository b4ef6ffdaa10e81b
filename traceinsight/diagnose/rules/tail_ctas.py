"""tail-ctas: the launch ends with a tail during which fewer than half the SMs still work.

With the batch composition known, the schedule model simulates the launch and reports the tail (time with
fewer than half the SMs busy) and the work items that form it; the tail share is applied to the measured time.
Without it, a launch much slower than the kernel's balanced launches is reported with the excess as an
estimate of its tail. Launches already reported as split-KV off or starved are left to those findings.

The candidates are selected in SQL (simulated_launches.sql, slow_launches.sql); the simulated ones are priced
here in Python, since a simulation's per-SM segments and tail intervals are not relational.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Iterator

from traceinsight.diagnose import remedies
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.launch_table import select
from traceinsight.diagnose.rule import Input, limit
from traceinsight.diagnose.savings import by_step, cap, tail_saving_ns
from traceinsight.diagnose.slowdown import Slowdown, slow_rows
from traceinsight.diagnose.views import LaunchView, step_ranges, steps_of
from traceinsight.units import fmt_ns

ID = "tail-ctas"
NAME = "Tail CTAs"
DESCRIPTION = "Launches that end with a few long CTAs running while most SMs are idle."
PASSED = "no launch had a significant tail"
NEEDS = (Input.STEPS,)
OPTIONAL = (Input.SIDECAR, Input.SCHEDULE)

# Simulated tail at least this share of the launch...
TAIL_MIN_FRACTION = 0.2
# ...and at least this long once scaled to the measured time (ns).
TAIL_MIN_NS = 20_000
# Without a schedule: a launch this many times the kernel's balanced reference counts as having a tail.
SLOWDOWN_MIN_RATIO = 1.3
# Tail share from which the finding is a warning rather than info.
WARNING_FRACTION = 0.5
# Findings of these rules already explain their launches' tails.
PARENTS = ("split-kv-off", "split-kv-starved")
# Rules whose findings this rule reads (declared: the registry shows it only those).
READS = PARENTS


def _tail(v: LaunchView) -> tuple[float, float, str] | None:
    """(tail share of the launch, estimated saving ns, tail work items in words) from the simulation."""
    m = v.model
    if m is None or m.sim is None or not m.predicted_ns:
        return None
    sim = m.sim
    share = sim.tail_ns / sim.predicted_ns if sim.predicted_ns else 0.0
    starts = [a for a, _ in sim.tail_intervals]
    sms = set()
    for seg in sim.segments:
        i = bisect.bisect_left(starts, seg.end_ns) - 1  # the last tail interval starting before the segment ends
        if i >= 0 and sim.tail_intervals[i][1] > seg.start_ns:
            sms.add(seg.sm)
    busy = len(sms) / len(sim.sm_busy_ns) if sim.sm_busy_ns else 0.5
    tail_ns = share * v.dur_ns
    reqs = Counter(it.request for it in sim.tail_items)
    longest = ", ".join(f"request {r} ({n} item{'s' if n > 1 else ''})" for r, n in reqs.most_common(3))
    return share, tail_saving_ns(tail_ns, busy), longest


def apply(ctx: TraceAnalysis) -> list[Finding]:
    frac_min = limit(ctx, ID, "TAIL_MIN_FRACTION", TAIL_MIN_FRACTION)
    ns_min = limit(ctx, ID, "TAIL_MIN_NS", TAIL_MIN_NS)
    ratio_min = limit(ctx, ID, "SLOWDOWN_MIN_RATIO", SLOWDOWN_MIN_RATIO)
    covered = {s for f in ctx.findings if f.id in PARENTS for s in f.steps}
    out = []
    # The candidates, in SQL: every simulated launch (simulated_launches.sql; priced below by its simulation)
    # and every other launch slow by durations (slow_launches.sql), per kernel name in first-seen order.
    # Both come in that order; merged as they are read (either may hold every launch of a long trace).
    rows, views = select(ctx, "simulated_launches")
    simulated: Iterator[tuple[int, int, Slowdown | None]] = ((name_id, pos, None) for pos, name_id in rows)
    candidates = heapq.merge(simulated, slow_rows(ctx, None, None, ratio_min, ns_min, unsimulated=True),
                             key=lambda c: (c[0], c[1]))
    groups: dict[int, list[tuple[LaunchView, float, float, str, str]]] = {}  # view, share, saving, items, source
    for name_id, pos, sd in candidates:
        v = views[pos]
        if v.step.index in covered:
            continue
        if sd is None:
            t = _tail(v)
            assert t is not None  # a simulated launch has a tail (possibly none long)
            share, saving, items = t
            if share >= frac_min and share * v.dur_ns >= ns_min:
                groups.setdefault(name_id, []).append((v, share, saving, items, "model"))
        else:
            groups.setdefault(name_id, []).append(
                (v, sd.excess_ns / v.dur_ns, sd.excess_ns, "", f"durations ({sd.reference})"))
    for hits in groups.values():
        wv, share, _, items, source = max(hits, key=lambda h: h[1] * h[0].dur_ns)
        steps = steps_of(h[0] for h in hits)
        saving = sum(cap(h[2], h[0].dur_ns) or 0.0 for h in hits)
        evidence = {
            "kernel": wv.kernel,
            "backend": wv.backend,
            "launches": len(hits),
            "worst_step": wv.step.index,
            "worst_dur_ns": wv.dur_ns,
            "worst_tail_ns": round(share * wv.dur_ns),
            "worst_tail_fraction": round(share, 3),
            "worst_tail_items": items or None,
            "worst_max_kv_len": wv.batch.max_kv_len if wv.batch else None,
            "source": source,
        }
        formed = f" The tail is formed by {items}." if items else ""
        out.append(Finding(
            id=ID,
            severity=Severity.WARNING if share >= WARNING_FRACTION else Severity.INFO,
            steps=tuple(steps),
            summary=(f"tail CTAs in {len(hits)} launches of {wv.kernel} (steps {step_ranges(steps)}): up to "
                     f"{share:.0%} of {fmt_ns(wv.dur_ns)} with fewer than half the SMs busy"),
            evidence=evidence,
            explanation=(
                "A kernel ends when its last CTA ends. When a few work items are much longer than the rest, the "
                "GPU runs at full width for a while and then waits for those few CTAs on a handful of SMs. In "
                f"step {wv.step.index} about {fmt_ns(share * wv.dur_ns)} of {fmt_ns(wv.dur_ns)} was such a tail "
                f"(estimated from {source}).{formed}"),
            remedy=remedies.remedy(ID, remedies.facts(ctx), backends=[wv.backend or ""]),
            saving_ns=round(saving),
            step_saving_ns=by_step((h[0].step.index, cap(h[2], h[0].dur_ns) or 0.0) for h in hits),
        ))
    return out
