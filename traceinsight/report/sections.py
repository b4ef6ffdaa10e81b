"""The report's verdict, read from the JSON document of an analysis (`traceinsight.analysis/1`): the root causes
(findings grouped, worst first) with the savings attributed to them and what those add up to, and the steps each
one tags. The HTML, Markdown, text and dashboard renderers only lay these out. Times in ns.

The report's other sections each have their file: the step timeline (`timeline`), the batch-size sweep
(`sweep_view`: the panels the analysis computed), the kernel and threshold tables (`kernel_tables`), the Gantt's
launch (`launch_pick`) and the notes (`notes`: what a section needs, the methods, the checks). Every builder
tolerates missing pieces (no findings, no thresholds, no per-launch model): it returns an empty result and
`notes.missing()` says what is needed to get it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from traceinsight.diagnose.finding import BASIS_SPAN, severity_rank
from traceinsight.report.finding_order import SPIKE_ID, sorted_findings


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
    if basis is None:  # (the rule registry: every rule and the model, 0.16 s of a fresh process; so only here)
        from traceinsight.diagnose.rootcause import saving_basis

        basis = saving_basis(rule_id)
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
