"""threshold-proximity: the batch is a few requests short of the split-KV threshold.

"N more requests and split-KV turns off": a step whose batch size B is within a small margin below B_th still
splits, but a few more running requests would switch the planner to no split at all. With the batch
composition known, the schedule model prices that step at B_th (the extra requests at the median KV length).
The launches are selected in SQL (near_threshold_launches.sql); the pricing is a replay of the planner and the
simulator, in Python.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import numpy as np

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding, Severity
from traceinsight.diagnose.launch_table import launch_relation, select_groups
from traceinsight.diagnose.rule import Input, NotApplicable, limit
from traceinsight.diagnose.views import LAUNCHES, LaunchView, step_ranges, steps_of
from traceinsight.diagnose.whatif import cost_for, occupancy_for
from traceinsight.ingest.arrow_numpy import ints, numbers, valid
from traceinsight.model.batches import fa3_options, planner_batch
from traceinsight.model.occupancy import CUDA_CORE, FA2, FA3
from traceinsight.model.planners import plan
from traceinsight.model.simulate import simulate
from traceinsight.units import fmt_ns

ID = "threshold-proximity"
NAME = "Close to the split-KV threshold"
DESCRIPTION = "Steps whose batch is a few requests below the size at which split-KV turns off."
PASSED = "no step's batch was close below its kernel's split-KV threshold"
NEEDS = (Input.STEPS, Input.THRESHOLDS)
OPTIONAL = (Input.SIDECAR, Input.SCHEDULE)
USES = (LAUNCHES,)

# Backends whose split threshold is modeled (FlashInfer's CTA budgets; FA3's dynamic-split cap of 992 requests).
BACKENDS = (CUDA_CORE, FA2, FA3)
# A batch is close when B_th - B is at most max(MARGIN_MIN_REQUESTS, MARGIN_FRACTION x B_th).
MARGIN_MIN_REQUESTS = 4
MARGIN_FRACTION = 0.1
# Warning (else info) when the step priced at B_th would take at least this many times as long.
RISK_MIN_RATIO = 2.0


def _at_threshold_ns(ctx: TraceAnalysis, v: LaunchView, b_th: int) -> float | None:
    """Predicted time of this step grown to B_th requests (the added ones at the median KV length)."""
    s = ctx.schedule
    if s is None or s.gpu is None or v.batch is None or s.costs.get(v.name) is None:
        return None
    batch = planner_batch(v.batch)
    if batch is None or batch.batch_size >= b_th:
        return None
    key = ("at-threshold", v.backend, batch, b_th)
    if key not in s.cache:
        med = int(statistics.median(batch.kv_lens))
        grown = replace(batch, kv_lens=batch.kv_lens + (med,) * (b_th - batch.batch_size), qo_lens=None)
        occ, _ = occupancy_for(s, v.backend or "", grown)
        cost, _ = cost_for(s, v.backend or "")
        opts = fa3_options(v.launch.attention, v.batch) if v.backend == FA3 else {}
        p = plan(v.backend or "", grown, s.gpu, occ, cuda_graph=v.cuda_graph, **opts)
        s.cache[key] = simulate(p, s.gpu, occ, cost).predicted_ns
    return float(s.cache[key])


def _split_launches_with_batch_sizes(ctx: TraceAnalysis) -> bool:
    """Whether some split launch of BACKENDS has a known batch size and a kernel with a split-KV threshold: over
    the launch relation's columns (no pass over 10^6 views)."""
    t = launch_relation(ctx)
    if not t.num_rows:
        return False
    col = {name: t.column(name).combine_chunks() for name in ("batch_size", "split_kv", "backend", "b_threshold")}
    backend = col["backend"]
    mine = np.array([w in BACKENDS for w in backend.dictionary.to_pylist()] + [False], bool)
    ok = valid(col["batch_size"]) & valid(col["split_kv"]) & numbers(col["split_kv"])
    ok &= mine[ints(backend.indices, -1)]  # (NULL: the last, False)
    ok &= ints(col["b_threshold"], 0) != 0  # a threshold that is known and not 0
    return bool(ok.any())


def apply(ctx: TraceAnalysis) -> list[Finding]:
    if not _split_launches_with_batch_sizes(ctx):
        raise NotApplicable("the batch size of split launches is unknown without a sidecar (--meta SIDECAR)")
    m_req = limit(ctx, ID, "MARGIN_MIN_REQUESTS", MARGIN_MIN_REQUESTS)
    m_frac = limit(ctx, ID, "MARGIN_FRACTION", MARGIN_FRACTION)
    risk = limit(ctx, ID, "RISK_MIN_RATIO", RISK_MIN_RATIO)
    out = []
    for group in select_groups(ctx, "near_threshold_launches", backends=list(BACKENDS), margin_min=m_req,
                               margin_fraction=m_frac):
        hits = [v for v, _ in group]
        thr = hits[0].threshold
        assert thr is not None and thr.b_threshold is not None
        b_th = thr.b_threshold
        priced = [(v, _at_threshold_ns(ctx, v, b_th)) for v in hits]
        risky = [(v, t) for v, t in priced if t is not None and t >= risk * v.dur_ns]
        wv, wt = max(priced, key=lambda p: ((p[1] or 0) / p[0].dur_ns, p[0].batch_size or 0))
        steps = steps_of(hits)
        headroom = b_th - (wv.batch_size or 0)
        evidence = {
            "kernel": wv.kernel,
            "backend": wv.backend,
            "b_threshold": b_th,
            "kv_heads": thr.kv_heads,
            "max_grid": thr.max_grid,
            "launches": len(hits),
            "closest_batch_size": max(v.batch_size or 0 for v in hits),
            "worst_step": wv.step.index,
            "worst_batch_size": wv.batch_size,
            "worst_headroom_requests": headroom,
            "worst_dur_ns": wv.dur_ns,
            "worst_predicted_at_threshold_ns": round(wt) if wt is not None else None,
            "launches_at_risk": len(risky),
        }
        priced_text = (f"; grown to B = {b_th} it would take about {fmt_ns(wt)} instead of {fmt_ns(wv.dur_ns)}"
                       if wt is not None else "")
        out.append(Finding(
            id=ID,
            severity=Severity.WARNING if risky else Severity.INFO,
            steps=tuple(steps),
            summary=(f"{headroom} more request{'s' if headroom != 1 else ''} and split-KV turns off: {len(hits)} "
                     f"launches of {wv.kernel} ran at B close below B_th = {b_th} (steps {step_ranges(steps)})"
                     + priced_text),
            evidence=evidence,
            explanation=(
                (f"FlashAttention-3's prepare kernel cuts long requests only while B <= {b_th - 1} (past that it runs "
                 "on more than one CTA and cuts none, whatever num_splits says)"
                 if wv.backend == FA3 else
                 f"{wv.backend}'s planner splits long requests only while B x H_kv < max_grid = {thr.max_grid}, "
                 f"i.e. for B < {b_th} with {thr.kv_heads} KV heads")
                + f". Step {wv.step.index} ran with B = "
                f"{wv.batch_size}, {headroom} below that line. It was fine, but as soon as the scheduler admits "
                f"{headroom} more request{'s' if headroom != 1 else ''} nothing is split any more, and if one "
                f"request is much longer than the rest the step time jumps{priced_text}."),
            remedy=(f"Cap the running batch at {b_th - 1} (or lower, leaving spare CTAs for splitting) for this "
                    "model and GPU" + (", FA3's dynamic-split cap; long requests above it are walked by one CTA per "
                                       "KV head." if wv.backend == FA3 else
                                       ", or use a backend whose split does not switch off with batch size.")),
            saving_ns=None,
        ))
    return out
