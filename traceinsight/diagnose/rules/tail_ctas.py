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
from collections import Counter

import numpy as np

from traceinsight.diagnose import remedies
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.launch_table import launch_column, select
from traceinsight.diagnose.rule import Input, limit
from traceinsight.diagnose.savings import by_step, tail_saving_ns
from traceinsight.diagnose.slowdown import slow_columns
from traceinsight.diagnose.views import LAUNCHES, LaunchView, step_ranges
from traceinsight.ingest.arrow_numpy import sorted_distinct
from traceinsight.units import fmt_ns

ID = "tail-ctas"
NAME = "Tail CTAs"
DESCRIPTION = "Launches that end with a few long CTAs running while most SMs are idle."
PASSED = "no launch had a significant tail"
NEEDS = (Input.STEPS,)
OPTIONAL = (Input.SIDECAR, Input.SCHEDULE)
USES = (LAUNCHES,)

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
    # The candidates, in SQL: every simulated launch (simulated_launches.sql; priced below by its simulation,
    # one at a time) and every other launch slow by durations (slow_launches.sql, read as columns: a long
    # trace has 10^5). Each kernel name's hits in launch order, the names in first-seen order.
    rows, views = select(ctx, "simulated_launches")
    sim: list[tuple[int, int, float, float, str]] = []  # name_id, pos, share, saving, items
    for at, nid in rows:
        v = views[at]
        if v.step.index in covered:
            continue
        t = _tail(v)
        assert t is not None  # a simulated launch has a tail (possibly none long)
        if t[0] >= frac_min and t[0] * v.dur_ns >= ns_min:
            sim.append((nid, at, *t))
    slow = slow_columns(ctx, None, None, ratio_min, ns_min, unsimulated=True)
    step_of, dur_of = launch_column(ctx, "step"), launch_column(ctx, "dur_ns")
    keep = ~np.isin(step_of[slow.pos], np.fromiter(covered, np.int64, len(covered)))
    sim_cols = list(zip(*sim, strict=True)) if sim else [(), (), (), (), ()]
    n_sim = len(sim)
    name_id = np.concatenate([np.asarray(sim_cols[0], np.int64), slow.name_id[keep]])
    pos = np.concatenate([np.asarray(sim_cols[1], np.int64), slow.pos[keep]])
    dur = dur_of[pos]
    excess = slow.excess_ns[keep]
    share = np.concatenate([np.asarray(sim_cols[2], float), excess / dur[n_sim:]])
    saving = np.concatenate([np.asarray(sim_cols[3], float), excess])
    reference = slow.reference[keep]
    order = np.lexsort((pos, name_id))  # as the two streams merged by (name_id, pos)
    starts = np.flatnonzero(np.r_[True, name_id[order][1:] != name_id[order][:-1]]) if len(order) else order
    for g in np.split(order, starts[1:]) if len(order) else []:
        w = int(g[int(np.argmax(share[g] * dur[g]))])  # the hit with the longest tail (the first of equals)
        wv = views[int(pos[w])]
        share_w = float(share[w])
        items, source = ((sim[w][4], "model") if w < n_sim
                         else ("", f"durations ({slow.references[int(reference[w - n_sim])]})"))
        steps = sorted_distinct(step_of[pos[g]]).tolist()
        capped = np.minimum(np.maximum(saving[g], 0.0), np.maximum(dur[g], 0).astype(float))
        total = sum(capped.tolist())  # added up in launch order, as floats add up left to right
        hit_steps = step_of[pos[g]]
        per_step = (dict(zip(hit_steps.tolist(), np.rint(capped).astype(np.int64).tolist(), strict=True))
                    if len(steps) == len(g) else by_step(zip(hit_steps.tolist(), capped.tolist(), strict=True)))
        hits = len(g)
        evidence = {
            "kernel": wv.kernel,
            "backend": wv.backend,
            "launches": hits,
            "worst_step": wv.step.index,
            "worst_dur_ns": wv.dur_ns,
            "worst_tail_ns": round(share_w * wv.dur_ns),
            "worst_tail_fraction": round(share_w, 3),
            "worst_tail_items": items or None,
            "worst_max_kv_len": wv.batch.max_kv_len if wv.batch else None,
            "source": source,
        }
        formed = f" The tail is formed by {items}." if items else ""
        out.append(Finding(
            id=ID,
            severity=Severity.WARNING if share_w >= WARNING_FRACTION else Severity.INFO,
            steps=tuple(steps),
            summary=(f"tail CTAs in {hits} launches of {wv.kernel} (steps {step_ranges(steps)}): up to "
                     f"{share_w:.0%} of {fmt_ns(wv.dur_ns)} with fewer than half the SMs busy"),
            evidence=evidence,
            explanation=(
                "A kernel ends when its last CTA ends. When a few work items are much longer than the rest, the "
                "GPU runs at full width for a while and then waits for those few CTAs on a handful of SMs. In "
                f"step {wv.step.index} about {fmt_ns(share_w * wv.dur_ns)} of {fmt_ns(wv.dur_ns)} was such a tail "
                f"(estimated from {source}).{formed}"),
            remedy=remedies.remedy(ID, remedies.facts(ctx), backends=[wv.backend or ""]),
            saving_ns=round(total),
            step_saving_ns=per_step,
        ))
    return out
