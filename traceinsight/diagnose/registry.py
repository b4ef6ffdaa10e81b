"""The diagnostics catalogue, in the order the rules run, and `run_rules()` which runs them in that order.

Order matters where a rule reads others' findings (its READS, which must run before it): `tail-ctas` leaves
out what the split-KV rules reported, `kv-bandwidth` what those and `tail-ctas` explain, and `latency-spike`,
which links each spike to the attention findings, runs next to last, and `slow-steps` (the runs of steps slower
than their baseline short of a spike, on latency-spike's step attribution) last. Each entry is a rule module (see
`traceinsight.diagnose.rule`). `diagnose()` (diagnose/run.py) runs them and links the findings to their roots.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from traceinsight.diagnose import attribution, host
from traceinsight.diagnose.attribution import ATTRIBUTION
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.diagnose.finding import Finding
from traceinsight.diagnose.host import HOST_RANGES
from traceinsight.diagnose.launch_table import backend_counts, release
from traceinsight.diagnose.rule import NotApplicable, RuleResult, missing_reason
from traceinsight.diagnose.rules import (
    codesign,
    decode_on_prefill_kernel,
    gpu_idle_gaps,
    kv_bandwidth,
    latency_spike,
    slow_path,
    slow_steps,
    sm_idle,
    split_kv_off,
    split_kv_starved,
    tail_ctas,
    threshold_proximity,
    wave_quantization,
)
from traceinsight.diagnose.views import LAUNCHES, release_views

RULES: tuple[ModuleType, ...] = (
    decode_on_prefill_kernel,
    split_kv_off,
    split_kv_starved,
    tail_ctas,
    sm_idle,
    threshold_proximity,
    wave_quantization,
    slow_path,
    kv_bandwidth,
    gpu_idle_gaps,
    codesign,
    latency_spike,
    slow_steps,
)

RULE_IDS: tuple[str, ...] = tuple(r.ID for r in RULES)


def release_launches(ctx: TraceAnalysis) -> None:
    """Let go of the launch relation the rules select from and the launch views it was built from (their counts
    per backend stay: `launch_table.backend_counts`)."""
    release(ctx)
    release_views(ctx)


# The products the rules cache on the analysis, each as what lets it go: a rule names those it reads in its USES,
# and `run_rules` lets each go after the last rule that applies and uses it (the launches: 10^6 named tuples and
# an Arrow table of 20 columns at 10^7 kernels; the attribution table: a component matrix and its baselines per
# step). Nothing after the rules reads them; a reader not declared (a rule, `explain`) makes them again.
PRODUCTS: dict[str, Callable[[TraceAnalysis], None]] = {
    LAUNCHES: release_launches,
    ATTRIBUTION: attribution.release,
    HOST_RANGES: host.release,
}


def rule(rule_id: str) -> ModuleType:
    """The rule module with this id (KeyError when there is none)."""
    for r in RULES:
        if r.ID == rule_id:
            return r
    raise KeyError(rule_id)


def run_rules(ctx: TraceAnalysis, rules: tuple[ModuleType, ...] = RULES) -> tuple[list[Finding], list[RuleResult]]:
    """Run `rules` in order on `ctx`; return all findings (in rule order) and one result per rule. While a rule
    runs, `ctx.findings` holds the findings so far of the rules it declares in READS (none when it declares none):
    what a rule depends on is written down, and it cannot depend on anything else."""
    try:
        return _run_rules(ctx, rules)
    finally:
        for let_go in PRODUCTS.values():
            let_go(ctx)


def last_users(rules: tuple[ModuleType, ...], applies: list[bool]) -> dict[str, int]:
    """Per product (PRODUCTS), the position in `rules` of the last rule that applies and uses it (its USES), -1
    for a product none uses."""
    last = dict.fromkeys(PRODUCTS, -1)
    for i, r in enumerate(rules):
        if applies[i]:
            for name in getattr(r, "USES", ()):
                last[name] = i
    return last


def _run_rules(ctx: TraceAnalysis, rules: tuple[ModuleType, ...]) -> tuple[list[Finding], list[RuleResult]]:
    findings: list[Finding] = []
    results: list[RuleResult] = []
    ctx.findings = findings
    # What a rule needs does not change while the rules run: each rule's missing need, known before the first,
    # says which is the last to read each product.
    missing = [missing_reason(r, ctx) for r in rules]
    last = last_users(rules, [m is None for m in missing])
    for i, r in enumerate(rules):
        for name, j in last.items():
            if i > j:  # (a rule that made it again without declaring it has it let go after it, too)
                PRODUCTS[name](ctx)
        reason = missing[i]
        if reason is None:
            # A rule sees the findings of the rules it declares it reads (READS), and no other.
            reads = set(getattr(r, "READS", ()))
            ctx.findings = [f for f in findings if f.id in reads]
            try:
                found = list(r.apply(ctx))
            except NotApplicable as exc:
                reason = str(exc)
            finally:
                ctx.findings = findings
        examined, skipped = scope(r, ctx)
        if reason is None and not found and skipped and not examined:
            reason = f"no launch of a backend this rule examines ({', '.join(r.BACKENDS)}); {skipped}"
        if reason is not None:
            results.append(RuleResult(r.ID, r.NAME, "not-applicable", reason, 0))
            continue
        findings.extend(found)
        ctx.findings = findings
        passed = r.PASSED + (f" (examined: {examined}; not examined: {skipped})" if skipped else "")
        results.append(RuleResult(r.ID, r.NAME, "fired" if found else "passed", "" if found else passed,
                                  len(found)))
    return findings, results


def scope(rule: ModuleType, ctx: TraceAnalysis) -> tuple[str, str]:
    """For a rule that examines only some attention backends (its BACKENDS): what it examined and what it left
    out, in words ('120 launches of flashinfer-cuda-core', '40 launches of fa3'); ('', '') for other rules."""
    backends = getattr(rule, "BACKENDS", None)
    if not backends:
        return "", ""
    counts = backend_counts(ctx)
    mine = {b: n for b, n in counts.items() if b in backends}
    other = {b: n for b, n in counts.items() if b not in backends}

    def words(c: dict[str, int]) -> str:
        return ", ".join(f"{n} launch{'es' if n != 1 else ''} of {b}" for b, n in sorted(c.items()))

    return words(mine), words(other)

