"""The report's content as data, read from the JSON document of an analysis (`traceinsight.analysis/1`): the
verdict, the step timeline, the batch-size sweep, the kernel and threshold tables and the methods notes. The
HTML, Markdown and dashboard renderers only lay these out. Times in ns.

Every builder tolerates missing pieces (no findings, no thresholds, no per-launch model): it returns an empty
result and `missing()` says what is needed to get it.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from traceinsight.diagnose.finding import severity_rank
from traceinsight.diagnose.rootcause import BASIS_SPAN, saving_basis

SPIKE_ID = "latency-spike"

# Findings that concern the trace as a whole (or a model config) rather than the steps they list: they do not
# colour spikes in the timeline.
GLOBAL_FINDINGS = frozenset({"codesign", "threshold-proximity", "gpu-idle-gaps"})

# `key=value` tokens in step names, e.g. "decode tc=0 dist=skew80 bs=384 step=2".
_TOKEN = re.compile(r"(?<![\w-])([A-Za-z_][\w-]*)=([^\s,;]+)")
# Tokens that only repeat a case (not part of what distinguishes one sweep panel from another).
_REPEAT_KEYS = frozenset({"step", "iter", "rep", "run", "i"})


def sorted_findings(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Findings, worst first: by severity, then by estimated saving (largest first), then by id."""
    return sorted(
        doc.get("findings") or [],
        key=lambda f: (severity_rank(f.get("severity")), -(f.get("saving_ns") or 0), f.get("id", "")),
    )


def total_step_ns(doc: dict[str, Any]) -> int:
    return sum(s["dur_ns"] for s in doc.get("steps") or [])


def steps_span_ns(doc: dict[str, Any]) -> int:
    """Time from the first step's start to the last step's end (ns; 0 without steps)."""
    steps = doc.get("steps") or []
    if not steps:
        return 0
    span: int = max(s["start_ns"] + s["dur_ns"] for s in steps) - min(s["start_ns"] for s in steps)
    return span


def saving_share(doc: dict[str, Any], rule_id: str, saving_ns: float, evidence: dict[str, Any] | None = None,
                 basis: str | None = None) -> str:
    """'40% of the steps' time' — or, for a rule whose saving lies between the steps (gpu-idle-gaps), a share of
    the time from the first step to the last (the span its own evidence `span_ns` measured, so that the share
    reads as its summary does); '' when that time is unknown. The totals are `saving_totals`' (every step, not
    only the steps a document holds). `basis`: the finding's `saving_basis` as its document gives it; without one
    (documents written before findings carried it), the rule's own, from the rule registry."""
    if basis is None:
        basis = saving_basis(rule_id)  # (the rule registry: every rule and the model, 0.16 s of a fresh process)
    totals = saving_totals(doc)
    if basis == BASIS_SPAN:
        span = (evidence or {}).get("span_ns") or totals["steps_wall_ns"] + totals["between_steps_ns"]
        total, label = int(span), "of the time from first to last step"
    else:
        total, label = totals["steps_wall_ns"], "of the steps' time"
    return f"{saving_ns / total:.0%} {label}" if total else ""


def saving_totals(doc: dict[str, Any]) -> dict[str, int]:
    """The time the listed savings are bounded by, and what they add up to (ns): steps_wall_ns (every step's
    wall time), between_steps_ns (the rest of the time from the first step to the last), listed_steps_ns and
    listed_between_ns (the root causes' attributed savings on each basis). Read from `savings` in the document
    (json_doc writes it over every step), else from the steps it holds."""
    got = doc.get("savings")
    if isinstance(got, dict) and "steps_wall_ns" in got:
        return {k: int(v or 0) for k, v in got.items() if isinstance(v, (int, float)) or v is None}
    steps = doc.get("steps") or []
    wall = sum(int(s.get("wall_ns", s["dur_ns"])) for s in steps)
    listed = {"steps": 0, "span": 0}
    for f in doc.get("findings") or []:
        if f.get("supports") is None:
            listed[f.get("saving_basis") or "steps"] = listed.get(f.get("saving_basis") or "steps", 0) + int(
                _attributed(f) or 0)
    return {"steps_wall_ns": wall, "between_steps_ns": max(0, steps_span_ns(doc) - wall),
            "listed_steps_ns": listed.get("steps", 0), "listed_between_ns": listed.get("span", 0)}


def _attributed(f: dict[str, Any]) -> int | None:
    """A finding's saving as reports list it: the attributed one (bounded), else its rule's estimate (documents
    written before root causes were linked)."""
    if "attributed_saving_ns" in f:
        v = f.get("attributed_saving_ns")
        return None if v is None else int(v)
    v = f.get("saving_ns")
    return None if v is None else int(v)


def savings_line(doc: dict[str, Any]) -> str:
    """'savings: 806 ms of 1.01 s in steps (floor 207 ms), 439 ms of 782 ms between steps' ('' without savings):
    each basis against the time that bounds it, never their sum against the steps' time (a saving between steps
    is no part of them). The floor is what the steps would still take with the remedies (`steps_floor_ns`), shown
    when the document holds it. (Kept this short: with the rules checked it fits one 120-column line.)"""
    from traceinsight.units import fmt_ns

    t = saving_totals(doc)
    parts = []
    if t.get("listed_steps_ns"):
        floor = t.get("steps_floor_ns")
        parts.append(f"{fmt_ns(t['listed_steps_ns'])} of {fmt_ns(t['steps_wall_ns'])} in steps"
                     + (f" (floor {fmt_ns(floor)})" if floor is not None else ""))
    if t.get("listed_between_ns"):
        parts.append(f"{fmt_ns(t['listed_between_ns'])} of {fmt_ns(t['between_steps_ns'])} between steps")
    return "savings: " + ", ".join(parts) if parts else ""


@dataclass(frozen=True)
class VerdictLine:
    """One finding summarised in a line."""

    severity: str
    id: str
    summary: str
    saving_ns: int | None
    steps: int


def verdict(doc: dict[str, Any], limit: int = 6) -> list[VerdictLine]:
    """The worst root causes, one line each (at most `limit`), with their attributed savings."""
    return [
        VerdictLine(g.severity, g.id, g.summary, g.saving_ns, len(g.steps))
        for g in finding_groups(doc)[:limit]
    ]


# INFO root causes saving less than this share of their time are folded into one line in the terminal.
MINOR_SHARE = 0.05


def remedy_head(remedy: str) -> str:
    """The first thing a remedy says to do: its text up to the first alternative (', or ') or second sentence,
    without its asides in parentheses."""
    head = remedy
    for sep in (re.compile(r", or "), re.compile(r"; "), re.compile(r"(?<!e\.g)(?<!i\.e)\. ")):
        m = sep.search(head)
        if m and m.start() > 0:
            head = head[:m.start()]
    cut = head != remedy.rstrip(".")
    head = re.sub(r" \([^()]*\)", "", head)
    return head.rstrip(".") + ("…" if cut or head != remedy.rstrip(".") else "")


@dataclass
class FindingGroup:
    """One root cause as the reports show it: the root findings of one rule and reason (a rule may report
    several, e.g. one latency spike per burst) with the findings that are their evidence (`related`, worst
    first). severity: the worst of all of them; saving_ns: the roots' attributed savings (bounded by the time
    they come from, `traceinsight.diagnose.rootcause`); steps: the union of the roots' and the evidence's steps;
    findings: the roots, worst first (the first one's summary leads)."""

    id: str
    severity: str
    saving_ns: int | None
    steps: list[int]
    findings: list[dict[str, Any]]
    related: list[dict[str, Any]] = field(default_factory=list)

    @property
    def summary(self) -> str:
        return self.findings[0].get("summary", "") if self.findings else ""

    def share(self, doc: dict[str, Any]) -> str:
        """The saving as a share of the time it comes from ('45% of the steps' time'; '' without a saving)."""
        if not self.saving_ns:
            return ""
        first = self.findings[0] if self.findings else {}
        return saving_share(doc, self.id, self.saving_ns, first.get("evidence"), first.get("saving_basis"))

    def minor(self, doc: dict[str, Any]) -> bool:
        """An INFO root cause worth less than MINOR_SHARE of the time it comes from: the terminal folds these into
        one line."""
        if self.severity != "info":
            return False
        share = self.share(doc)
        return not share or float(share.split("%")[0]) < 100 * MINOR_SHARE

    def evidence_text(self) -> str:
        """'latency-spike ×4, sm-idle': the rules whose findings support this root cause."""
        counts: dict[str, int] = {}
        for f in self.related:
            counts[f.get("id", "?")] = counts.get(f.get("id", "?"), 0) + 1
        return ", ".join(k if n == 1 else f"{k} ×{n}" for k, n in counts.items())


def _reason(f: dict[str, Any]) -> str | None:
    ev = f.get("evidence") or {}
    reason = ev.get("why_unsplit") or ev.get("why_starved")
    if reason is None and f.get("id") == SPIKE_ID:
        reason = ev.get("cause")
    return str(reason) if reason is not None else None


def finding_groups(doc: dict[str, Any]) -> list[FindingGroup]:
    """One group per root cause: root findings (`supports` empty) grouped by rule id and named reason (FA3's batch
    cap vs a forced num_splits; a spike's cause), each with the findings that support it; worst first: by
    severity, then by the group's saving."""
    ordered = sorted_findings(doc)
    by_ref = {f["ref"]: f for f in ordered if f.get("ref")}
    groups: dict[tuple[str, str | None], FindingGroup] = {}
    root_group: dict[str, FindingGroup] = {}
    for f in ordered:
        if f.get("supports") is not None and f["supports"] in by_ref:
            continue
        fid = f.get("id", "?")
        key = (fid, _reason(f))
        g = groups.get(key)
        if g is None:
            g = groups[key] = FindingGroup(fid, f.get("severity", "info"), None, [], [])
        g.findings.append(f)
        saving = _attributed(f)
        if saving is not None:
            g.saving_ns = (g.saving_ns or 0) + saving
        g.steps = sorted(set(g.steps) | set(f.get("steps") or []))
        if f.get("ref"):
            root_group[f["ref"]] = g
    for f in ordered:
        g = root_group.get(f.get("supports") or "")
        if g is None:
            continue
        g.related.append(f)
        g.steps = sorted(set(g.steps) | set(f.get("steps") or []))
        if severity_rank(f.get("severity")) < severity_rank(g.severity):
            g.severity = f.get("severity", g.severity)
    return sorted(groups.values(), key=lambda g: (severity_rank(g.severity), -(g.saving_ns or 0), g.id))


def step_tags(doc: dict[str, Any]) -> dict[int, list[str]]:
    """Per step, the root causes that concern it, worst first: a root cause tags the steps its own findings
    list and the steps of the latency spikes it caused ('split-kv-off (spike)'). An INFO root cause tags only
    steps that broke from their trend (a latency spike): a healthy step is not tagged by something worth
    knowing about the whole trace."""
    spikes = {i for f in doc.get("findings") or [] if f.get("id") == SPIKE_ID for i in f.get("steps") or []}
    out: dict[int, list[str]] = {}
    for g in finding_groups(doc):
        caused = {i for f in g.related if f.get("id") == SPIKE_ID for i in f.get("steps") or []}
        if g.id == SPIKE_ID:
            caused = set(g.steps)
        own = {i for f in g.findings for i in f.get("steps") or []} | caused
        for i in sorted(own):
            if g.severity == "info" and i not in spikes:
                continue
            tag = g.id + (" (spike)" if i in caused and g.id != SPIKE_ID else "")
            if tag not in out.get(i, []):
                out.setdefault(i, []).append(tag)
    return out


def group_steps(doc: dict[str, Any]) -> list[list[int]]:
    """Per root cause (`finding_groups` order), the steps it tags (`step_tags`)."""
    tags = step_tags(doc)
    out = []
    for g in finding_groups(doc):
        out.append([i for i, t in tags.items() if any(x == g.id or x.startswith(g.id + " (") for x in t)])
    return out


# --- timeline -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TimelinePoint:
    """One step in the time series. `cause` is the id of the finding that explains a spike (None if none)."""

    index: int
    name: str
    start_ns: int
    dur_ns: int
    attention_ns: int
    split_kv: bool | None
    spike: bool
    cause: str | None


def _spike_causes(finding: dict[str, Any]) -> dict[int, str]:
    """Cause per spike step when the latency-spike finding names one in its evidence: `evidence.cause` (one
    id for all its steps), `evidence.causes` as {step: id} or [{step, cause}], or `evidence.spikes` as
    [{step, cause}]."""
    ev = finding.get("evidence") or {}
    out: dict[int, str] = {}
    if isinstance(ev.get("cause"), str):  # one cause for every step of this spike
        out.update({i: ev["cause"] for i in finding.get("steps") or []})
    raw = ev.get("causes")
    if isinstance(raw, dict):
        for k, v in raw.items():
            if str(k).lstrip("-").isdigit() and isinstance(v, str):
                out[int(k)] = v
    for key in ("causes", "spikes"):
        items = ev.get(key)
        if isinstance(items, list):
            for item in items:
                if isinstance(item, dict) and isinstance(item.get("step"), int):
                    cause = item.get("cause") or item.get("id")
                    if isinstance(cause, list):
                        cause = cause[0] if cause else None
                    if isinstance(cause, str):
                        out[item["step"]] = cause
    return out


def timeline(doc: dict[str, Any]) -> list[TimelinePoint]:
    """Every step with its spike flag and cause. A spike's cause is the one the latency-spike finding names,
    else the worst step-level finding that lists the step."""
    findings = sorted_findings(doc)
    spikes: set[int] = set()
    named: dict[int, str] = {}
    by_step: dict[int, str] = {}
    for f in findings:
        steps = f.get("steps") or []
        if f.get("id") == SPIKE_ID:
            spikes.update(steps)
            named.update(_spike_causes(f))
        elif f.get("id") not in GLOBAL_FINDINGS:
            for i in steps:
                by_step.setdefault(i, f["id"])  # findings are worst first
    out = []
    for s in doc.get("steps") or []:
        i = s["index"]
        spike = i in spikes
        out.append(TimelinePoint(i, s["name"], s["start_ns"], s.get("wall_ns", s["dur_ns"]), s["attention_ns"],
                                 s["split_kv"], spike,
                                 (named.get(i) or by_step.get(i)) if spike else None))
    return out


def spike_causes(doc: dict[str, Any]) -> dict[int, str]:
    """Cause per step of every latency-spike finding (onset steps included)."""
    out: dict[int, str] = {}
    for f in doc.get("findings") or []:
        if f.get("id") == SPIKE_ID:
            cause = (f.get("evidence") or {}).get("cause")
            for i in f.get("steps") or []:
                if cause:
                    out.setdefault(i, cause)
    return out


# Breakdown components shown apart in the steps tables; the rest of the GPU work is summed as "other GPU".
IDLE_COMPONENTS = ("idle-host", "idle-wait", "idle-unknown")


def breakdown_parts(b: dict[str, Any] | None) -> dict[str, int]:
    """A step breakdown in four parts (ns): attention (with prefill), other GPU work, GPU waiting for the host,
    other GPU idle."""
    comps = (b or {}).get("components") or {}
    attention = comps.get("attention", 0) + comps.get("prefill", 0)
    host = comps.get("idle-host", 0)
    other_idle = sum(comps.get(c, 0) for c in IDLE_COMPONENTS) - host
    other_gpu = sum(comps.values()) - attention - host - other_idle
    return {"attention": attention, "other_gpu": other_gpu, "host": host, "other_idle": other_idle}


@dataclass
class IncidentRow:
    """One latency-spike incident as the reports show it: its steps, cause, onset, worst step, and per
    component the mean time per step against its baseline (ns), largest growth first."""

    steps: list[int]
    cause: str
    onset: list[int]
    threshold_step: int | None
    worst_step: int
    worst_ns: int
    worst_baseline_ns: int
    ratio: float
    excess_ns: int
    parts: list[dict[str, Any]]
    remedy: str

    @property
    def label(self) -> str:
        lo, hi = self.steps[0], self.steps[-1]
        return f"step {lo}" if lo == hi else f"steps {lo}-{hi}"


def incident_rows(doc: dict[str, Any], limit: int = 12) -> list[IncidentRow]:
    """The latency-spike incidents reported one by one (not the folded ones), most excess time first."""
    out = []
    for f in doc.get("findings") or []:
        ev = f.get("evidence") or {}
        if f.get("id") != SPIKE_ID or ev.get("folded") or "attribution" not in ev:
            continue
        n = max(1, len(f.get("steps") or []))
        parts = [{**r, "step_ns": r["step_ns"] / n, "baseline_ns": r["baseline_ns"] / n,
                  "delta_ns": r["delta_ns"] / n} for r in ev["attribution"]]
        out.append(IncidentRow(list(f.get("steps") or []), ev.get("cause") or "unexplained",
                               list(ev.get("onset_steps") or []), ev.get("threshold_step"), ev["worst_step"],
                               ev["worst_dur_ns"], ev["worst_baseline_ns"], ev["worst_ratio"], ev["excess_ns"], parts,
                               f.get("remedy") or ""))
    out.sort(key=lambda r: -r.excess_ns)
    return out[:limit]


def parts_text(parts: list[dict[str, Any]], limit: int = 3) -> str:
    """'attention +12.1 ms (93%), idle-host +0.8 ms (6%)': the parts that grew, with their share of the excess."""
    from traceinsight.units import fmt_ns

    grown = [p for p in parts if p.get("attributed_ns", 0) > 0][:limit]
    return ", ".join(f"{p['component']} +{fmt_ns(p['delta_ns'])} ({100 * p['share']:.0f}%)" for p in grown) or "-"


# --- sweep --------------------------------------------------------------------------------------------------

@dataclass
class SweepSeries:
    """Latency against batch size for one KV-length distribution (median over repeated steps, ns)."""

    dist: str
    batch: list[int] = field(default_factory=list)
    median_ns: list[int] = field(default_factory=list)
    split_off: list[bool] = field(default_factory=list)  # True where every launch of the case ran split-KV off


@dataclass
class SweepPanel:
    """One sweep (e.g. one decode path `tc=1`), with its attention kernel and the split-KV threshold."""

    key: str
    kernel: str | None
    backend: str | None
    series: list[SweepSeries]
    b_threshold: int | None
    threshold_source: str | None  # which thresholds entry gave B_th

    @property
    def threshold_text(self) -> str:
        """B_th in words: the value and where it came from, or why there is none."""
        if self.b_threshold:
            return f"B_th = {self.b_threshold} ({self.threshold_source})"
        if self.threshold_source:
            return f"no B_th: {self.threshold_source} never turns split-KV off by batch size"
        return "B_th not available (needs the schedule model's thresholds for this kernel)"

    @property
    def batch_sizes(self) -> list[int]:
        return sorted({b for s in self.series for b in s.batch})


def step_tokens(name: str) -> dict[str, str]:
    """`key=value` tokens of a step name."""
    return dict(_TOKEN.findall(name or ""))


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def _threshold_for(doc: dict[str, Any], kernel: str | None, backend: str | None) -> tuple[int | None, str | None]:
    rows = doc.get("thresholds") or []
    matchers: tuple[Callable[[dict[str, Any]], bool], ...] = (
        lambda t: t.get("kernel") == kernel and t.get("backend") == backend,
        lambda t: t.get("backend") == backend and backend is not None,
        lambda t: t.get("kernel") == kernel and kernel is not None,
    )
    for match in matchers:
        for t in rows:
            if match(t):
                return t.get("b_threshold"), f"{t.get('kernel')} ({t.get('backend')}, H_kv={t.get('kv_heads')})"
    return None, None


def sweep(doc: dict[str, Any]) -> list[SweepPanel]:
    """Panels of latency vs batch size per distribution, from steps named with `dist=… bs=…` tokens. Steps
    whose names carry other tokens (like `tc=0`) are split into one panel per value; `step=`/`iter=` tokens
    only repeat a case. Empty when the trace is not such a sweep."""
    cases: dict[str, dict[str, dict[int, list[dict[str, Any]]]]] = defaultdict(lambda: defaultdict(dict))
    for s in doc.get("steps") or []:
        tok = step_tokens(s["name"])
        b = _int(tok.get("bs") or tok.get("b") or tok.get("batch"))
        dist = tok.get("dist")
        if b is None or dist is None:
            continue
        key = " ".join(f"{k}={v}" for k, v in tok.items()
                       if k not in ("bs", "b", "batch", "dist") and k not in _REPEAT_KEYS)
        cases[key][dist].setdefault(b, []).append(s)
    panels = []
    for key in sorted(cases):
        series = []
        kernels: dict[tuple[str | None, str | None], int] = defaultdict(int)
        for dist in sorted(cases[key], key=_dist_order):
            ser = SweepSeries(dist)
            for b in sorted(cases[key][dist]):
                steps = cases[key][dist][b]
                ser.batch.append(b)
                ser.median_ns.append(int(statistics.median(s["attention_ns"] for s in steps)))
                launches = [x for s in steps for x in s["launches"]]
                ser.split_off.append(bool(launches) and all(x.get("split_kv") is False for x in launches))
                for x in launches:
                    kernels[(x.get("kernel"), x.get("backend"))] += 1
            series.append(ser)
        if sum(len(s.batch) for s in series) < 2:
            continue
        kernel, backend = max(kernels, key=lambda k: kernels[k]) if kernels else (None, None)
        b_th, src = _threshold_for(doc, kernel, backend)
        panels.append(SweepPanel(key or "sweep", kernel, backend, series, b_th, src))
    return panels


# Sweeps drawn side by side at most (a trace of call variants has dozens; the notes list them all).
MAX_SWEEP_PANELS = 4


def plotted_panels(panels: list[SweepPanel]) -> list[SweepPanel]:
    """The sweeps a figure draws: at most MAX_SWEEP_PANELS, those with the most batch sizes and distributions
    (in their own order)."""
    if len(panels) <= MAX_SWEEP_PANELS:
        return panels
    keep = set(sorted(range(len(panels)), key=lambda i: (-len(panels[i].batch_sizes), -len(panels[i].series),
                                                         i))[:MAX_SWEEP_PANELS])
    return [p for i, p in enumerate(panels) if i in keep]


def _dist_order(dist: str) -> tuple[int, str]:
    """uniform first, then the others by name (skew40 < skew60 < skew80)."""
    return (0 if dist == "uniform" else 1, dist)


# --- worst launch -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LaunchRef:
    """Where a launch is in the document, and why it was chosen."""

    step: int
    launch: int
    reason: str


def worst_launch(doc: dict[str, Any]) -> LaunchRef | None:
    """The attention launch the Gantt shows: the longest launch among the steps of the worst step-level
    finding (a simulated one when there is one); else the launch with the longest simulated tail; else the
    longest launch."""
    steps = doc.get("steps") or []
    if not steps:
        return None
    by_index = {s["index"]: s for s in steps}

    def longest(candidates: list[dict[str, Any]]) -> tuple[int, int] | None:
        """The longest launch, preferring launches the schedule model simulated (they can be drawn)."""
        best = None
        for s in candidates:
            for j, x in enumerate(s["launches"]):
                simulated = (x.get("model") or {}).get("predicted_ns") is not None
                key = (simulated, x["dur_ns"])
                if best is None or key > best[0]:
                    best = (key, s["index"], j)
        return (best[1], best[2]) if best else None

    for f in sorted_findings(doc):
        if f.get("id") in GLOBAL_FINDINGS or f.get("id") == SPIKE_ID:
            continue
        cands = [by_index[i] for i in f.get("steps") or [] if i in by_index]
        hit = longest(cands)
        if hit:
            return LaunchRef(hit[0], hit[1], f"longest launch among the steps of finding {f['id']}")
    tails = [(x["model"].get("tail_ns") or 0, s["index"], j) for s in steps for j, x in enumerate(s["launches"])
             if isinstance(x.get("model"), dict)]
    if tails:
        _, i, j = max(tails)
        return LaunchRef(i, j, "launch with the longest simulated tail")
    hit = longest(steps)
    return LaunchRef(hit[0], hit[1], "longest attention launch of the trace") if hit else None


def launch_at(doc: dict[str, Any], ref: LaunchRef) -> tuple[dict[str, Any], dict[str, Any]]:
    """(step, launch) dicts of a LaunchRef."""
    step = next(s for s in doc["steps"] if s["index"] == ref.step)
    return step, step["launches"][ref.launch]


# --- tables -------------------------------------------------------------------------------------------------

KERNEL_COLUMNS = ("kernel", "family", "backend", "phase", "count", "total", "mean", "max", "share", "grids",
                  "params")


def kernel_rows(doc: dict[str, Any], limit: int | None = 40) -> list[dict[str, Any]]:
    """The labeled kernel table, most GPU time first (ns in total_ns/mean_ns/max_ns)."""
    rows = sorted(doc.get("kernels") or [], key=lambda k: -(k.get("total_ns") or 0))
    return rows if limit is None else rows[:limit]


# A kernel's spread of execution times, as the kernel tables show it (keys `<column>_ns` of the JSON's kernels[]).
SPREAD_COLUMNS = ("median", "p90", "p99", "min", "max", "stddev")


def spread_cells(k: dict[str, Any]) -> list[str]:
    """The kernel's SPREAD_COLUMNS, formatted ('–' where the document predates them)."""
    from traceinsight.units import fmt_ns

    return [fmt_ns(k.get(f"{c}_ns")) if k.get(f"{c}_ns") is not None else "–" for c in SPREAD_COLUMNS]


def grids_text(grids: list[list[int]] | None, limit: int = 3) -> str:
    grids = grids or []
    text = " ".join("(" + ",".join(str(v) for v in g) + ")" for g in grids[:limit])
    return text + (f" +{len(grids) - limit}" if len(grids) > limit else "")


def params_text(params: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (params or {}).items())


# Template parameters that make a kernel's tile shape (FA3/FA2 kBlockM x kBlockN, FlashInfer's CTA tiles).
TILE_PARAMS = ("kBlockM", "kBlockN", "cta_tile_q", "cta_tile_kv", "cta_q", "cta_kv")


def threshold_shape(doc: dict[str, Any], t: dict[str, Any]) -> str:
    """The launch shape a threshold row stands for: the kernel's tile (template parameters) and its resources per
    CTA ('kBlockM=64 kBlockN=128; 256 threads, 255 regs, 147 KiB smem')."""
    params = next((k.get("params") or {} for k in doc.get("kernels") or [] if k.get("name") == t.get("name")), {})
    tile = " ".join(f"{p}={params[p]}" for p in TILE_PARAMS if params.get(p) is not None)
    res = [f"{t['threads_per_block']} threads" if t.get("threads_per_block") else "",
           f"{t['registers_per_thread']} regs" if t.get("registers_per_thread") else "",
           f"{round(t['smem_bytes'] / 1024)} KiB smem" if t.get("smem_bytes") else ""]
    return "; ".join(x for x in (tile, ", ".join(r for r in res if r)) if x)


def threshold_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The split-KV thresholds, one row per kernel x backend x shape (`threshold_shape`, KV heads, occupancy,
    max grid, B_th): template variants of a kernel that launch alike (FA3 with and without a causal mask) are one
    row, with `variants` counting them and `shape` saying what the row stands for."""
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for t in doc.get("thresholds") or []:
        shape = threshold_shape(doc, t)
        key = (t.get("kernel"), t.get("backend"), shape, t.get("kv_heads"), t.get("occupancy"), t.get("max_grid"),
               t.get("b_threshold"))
        if key in rows:
            rows[key]["variants"] += 1
        else:
            rows[key] = {**t, "shape": shape, "variants": 1}
    return list(rows.values())


def model_coverage(doc: dict[str, Any]) -> dict[str, int]:
    """How many attention launches carry a schedule model, by source ('sidecar' / 'trace'), and in all."""
    out: dict[str, int] = defaultdict(int)
    for s in doc.get("steps") or []:
        for x in s["launches"]:
            out["launches"] += 1
            m = x.get("model")
            if isinstance(m, dict):
                out[m.get("source") or "unknown"] += 1
    return dict(out)


# --- availability ---------------------------------------------------------------------------------------------

def missing(doc: dict[str, Any], what: str) -> str | None:
    """None when the section `what` has data; else the sentence saying what it needs."""
    if what == "findings" and not doc.get("findings"):
        if doc.get("checks"):
            return f"no findings: the {len(doc['checks'])} checks that ran found nothing to report"
        return "no findings (or not available: needs the diagnostics stage, traceinsight.diagnose)"
    if what == "thresholds" and not doc.get("thresholds"):
        return ("not available: needs the schedule model's occupancy and planner for an attention kernel the model "
                "knows, with registers/block/shared memory in the trace")
    if what == "steps" and not doc.get("steps"):
        return "not available: needs attention kernels in the trace (none were recognised)"
    if what == "sweep" and not sweep(doc):
        return ("not available: needs a sweep, i.e. steps named with `dist=… bs=…` tokens "
                "(e.g. `decode dist=skew80 bs=384`)")
    if what == "model" and not any(k != "launches" for k in model_coverage(doc)):
        return ("not available: needs the schedule model and a batch composition (a sidecar via --meta, or one "
                "bounded from the trace)")
    return None


# --- methods --------------------------------------------------------------------------------------------------

def methods(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """How every number in the report was obtained: (topic, explanation) pairs, with this trace's specifics."""
    tr = doc.get("trace") or {}
    gpu = tr.get("gpu") or {}
    steps = doc.get("steps") or []
    sources: dict[str, int] = defaultdict(int)
    for s in steps:
        sources[s.get("source", "?").split(":")[0]] += 1
    cov = model_coverage(doc)
    modelled = {k: v for k, v in cov.items() if k != "launches"}
    out = [
        ("Trace", f"{tr.get('path')} read as {tr.get('format')}"
         + (f" {tr.get('format_version')}" if tr.get("format_version") else "")
         + (f" ({tr.get('tool_version')})" if tr.get("tool_version") else "")
         + ". Every time is a GPU timestamp from the profiler, converted to integer nanoseconds; nothing is "
           "sampled or estimated at ingest."),
        ("GPU", f"{gpu.get('name') or 'unknown'}, {gpu.get('num_sms') or '?'} SMs, compute capability "
         f"{gpu.get('compute_capability') or '?'}: from the trace's device properties where present, else the "
         "built-in GPU table."),
        ("Kernel labels", "Each kernel name is matched against the ordered label rules (first match wins): family, "
         "backend, phase and template parameters come from the name; a launch's phase may be corrected by its step "
         "(a prefill-named kernel with one query row per request is decode). Time and share are sums over the "
         "kernel's executions; share is of all GPU kernel time."),
        ("Steps", f"{len(steps)} steps: "
         + (", ".join(f"{n} from {'annotation ranges' if k == 'range' else 'single launches'}"
                      for k, n in sorted(sources.items())) or "none")
         + ". A step is the outermost annotation/NVTX range around attention launches (whole-run wrappers "
           "ignored), else one attention launch with its merge/prepare kernels. Step time = first kernel start "
           "to last kernel end; attention time = attention + merge + prepare kernels."),
        ("Split-KV", "From the trace alone: on when a merge/combine kernel follows the attention launch on the same "
         "stream within the step; off when none does (for backends that split through a merge) or the backend never "
         "splits (FlashInfer SM90); unknown otherwise. With a sidecar, the planner model's decision is shown too."),
        ("Thresholds", "Resident CTAs per SM (occupancy) from registers/thread, threads/block and shared memory "
         "against the SM's limits; max_grid = occupancy × SMs (FlashInfer FA2: 2 × SMs); B_th = the smallest batch "
         "with B × H_kv ≥ max_grid, where the planner stops splitting KV."
         + ("" if doc.get("thresholds") else " (Not computed for this trace.)")),
        ("Schedule model", "Work items (request, KV chunk) from the backend's planner replayed on the batch "
         "composition; CTAs dispatched greedily onto SMs × occupancy slots (persistent kernels: longest first); per-"
         "CTA cost calibrated on this trace's balanced launches, with the speed-up of a CTA running alone on an SM "
         "modelled. Predicted time = makespan; SM idle = 1 − Σ busy / (SMs × makespan); tail = time with fewer than "
         "half the SMs busy. "
         + (f"Modelled launches: {', '.join(f'{v} from {k}' for k, v in sorted(modelled.items()))} of "
            f"{cov.get('launches', 0)}." if modelled else "No launch was modelled for this trace.")
         + _cost_models(doc)),
        ("Batch compositions", _batch_sources(doc)),
        ("Findings and savings", "Each finding comes from one diagnostic rule (its id); the saving is that rule's "
         "estimate of the time the remedy would save over the steps it lists (e.g. measured time minus the "
         "predicted time with split-KV kept on). Spikes: step time against a linear-in-KV-tokens baseline when token "
         "counts are known, else a robust rolling median; each spike is linked to the finding covering that step."),
        ("Sweep figure", "Steps named with `dist=… bs=…` tokens grouped by the other tokens; each point is the "
         "median attention time over the repeated steps of a case. The vertical line is B_th of the panel's "
         "attention kernel."),
    ]
    return out


def observed_switch(panel: SweepPanel) -> tuple[int | None, int | None]:
    """From a sweep panel: (largest batch size below the switch with split-KV on in some case, smallest batch size
    from which every case of every distribution ran split-KV off). (None, None) when the panel never switches
    (e.g. a backend that never splits). A uniform batch may run unsplit below the threshold (each request fits
    one chunk), so the switch is where the state stays off, not the first case that is off."""
    cases = sorted((b, o) for s in panel.series for b, o in zip(s.batch, s.split_off, strict=True))
    if not cases or all(o for _, o in cases) or not any(o for _, o in cases):
        return None, None
    last_on = max(b for b, o in cases if not o)
    after = [b for b, o in cases if b > last_on]
    return (last_on, min(after)) if after else (None, None)



def observed_switches(doc: dict[str, Any]) -> dict[tuple[str | None, str | None], str]:
    """Per (kernel, backend) of a sweep, where split-KV was seen to switch off, in words for the thresholds
    table ("on ≤ 256, off ≥ 297")."""
    observed: dict[tuple[str | None, str | None], str] = {}
    for p in sweep(doc):
        last_on, first_off = observed_switch(p)
        if first_off:
            observed[(p.kernel, p.backend)] = f"on ≤ {last_on}, off ≥ {first_off}" if last_on else f"off ≥ {first_off}"
    return observed

def _batch_sources(doc: dict[str, Any]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for st in doc.get("steps") or []:
        b = st.get("batch")
        counts[(b or {}).get("source") or "none"] += 1
    words = {"sidecar": "exact, from the sidecar (every request's KV length)",
             "trace": "bounded from the trace (grid, merge kernel, duration)", "none": "unknown"}
    parts = [f"{n} steps {words.get(k, k)}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    return ("; ".join(parts) or "no steps") + ". A sidecar step is matched to a step by its annotation name."


def _cost_models(doc: dict[str, Any]) -> str:
    model = doc.get("model") or {}
    costs = model.get("cost_models") or []
    text = ""
    if costs:
        text += " Cost models calibrated on this trace: " + "; ".join(
            f"{c.get('kernel') or (c.get('name') or '?')[:40]}: lone CTA {c.get('cta_rate_tokens_per_ns', 0):.3g}, "
            f"full SM {c.get('sm_rate_tokens_per_ns', 0):.3g} KV tokens/ns" for c in costs) + "."
    notes = model.get("notes") or []
    if notes:
        more = f" (+{len(notes) - 3} more)" if len(notes) > 3 else ""
        text += " Not modelled: " + "; ".join(notes[:3]) + more + "."
    return text


def checks(doc: dict[str, Any]) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """What the diagnostics checked: counts by status ('fired', 'passed', 'not-applicable'), and the rows
    (id, name, status, reason) with the ones that did not fire first."""
    rows = [c for c in doc.get("checks") or [] if isinstance(c, dict)]
    counts: dict[str, int] = defaultdict(int)
    for c in rows:
        counts[c.get("status") or "?"] += 1
    order = {"passed": 0, "not-applicable": 1, "fired": 2}
    return dict(counts), sorted(rows, key=lambda c: (order.get(c.get("status") or "", 3), c.get("id") or ""))


def checks_line(doc: dict[str, Any]) -> str | None:
    """'12 rules checked: 3 fired, 5 passed, 4 not applicable' (None when the diagnostics did not run)."""
    counts, rows = checks(doc)
    if not rows:
        return None
    parts = [f"{counts[k]} {k.replace('-', ' ')}" for k in ("fired", "passed", "not-applicable") if counts.get(k)]
    return f"{len(rows)} rules checked: " + ", ".join(parts)
