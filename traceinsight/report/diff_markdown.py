"""`traceinsight diff --format markdown`: the diff as a pull-request comment (GitHub-flavoured Markdown): the gate's
verdict first, then a table of the step and kernel groups that moved, then findings and kernels that appeared or
went. Only tables and lists, so it renders the same in any Markdown viewer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceinsight.units import fmt_ns

# Unchanged paired groups listed at most (the largest per-step changes first); regressed / improved always are.
UNCHANGED_SHOWN = 12


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _ms(ns: float | None) -> str:
    if ns is None:
        return "–"
    return ("+" if ns > 0 else "−" if ns < 0 else "") + fmt_ns(abs(int(ns)))


def _metric(row: Mapping[str, Any], m: str) -> str:
    v = (row.get("metrics") or {}).get(m)
    if not v or v.get("change") is None:
        return "–"
    if v.get("ci_low") is None:
        return f"{v['change']:+.1%} (n < 5)"
    return f"{v['change']:+.1%} [{v['ci_low']:+.1%}, {v['ci_high']:+.1%}]"


VERDICT_MARK = {"regressed": "**regressed**", "improved": "**improved**", "unchanged": "unchanged"}


def _groups_table(rows: list[Mapping[str, Any]], kind: str) -> list[str]:
    out = [f"| {kind} | verdict | n before → after | median change [95% CI] | p90 change [95% CI] | per step | cause |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = VERDICT_MARK.get(r.get("verdict") or "", r.get("status") or "")
        if r.get("status") == "path-change":
            verdict += " (path change)"
        causes = "; ".join(c["text"] for c in r.get("causes") or []) or "–"
        out.append(f"| {_cell(r['group'])} | {verdict} | {r['n_before']} → {r['n_after']} | {_metric(r, 'median')} "
                   f"| {_metric(r, 'p90')} | {_ms(r.get('per_step_ns'))} | {_cell(causes)} |")
    return out


def _shown(rows: list[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], int]:
    moved = [r for r in rows if r.get("verdict") in ("regressed", "improved")]
    same = [r for r in rows if r.get("verdict") == "unchanged"]
    return moved + same[:UNCHANGED_SHOWN], max(0, len(same) - UNCHANGED_SHOWN)


def render_markdown(d: Mapping[str, Any]) -> str:
    """The diff document (traceinsight.diff/1) as Markdown."""
    g = d["gate"]
    th = ", ".join(f"{m} {v:.1%}" for m, v in g["thresholds"].items())
    verdict = ("**Regression**" if g["regressed"] else "**Improvement**" if g["improved"] else "**No change**")
    lines = ["## traceinsight diff", "",
             f"before `{d['before']['path']}` ({d['before']['gpu'] or 'GPU unknown'}) → "
             f"after `{d['after']['path']}` ({d['after']['gpu'] or 'GPU unknown'})", "",
             f"{verdict} beyond the thresholds ({th}):", ""]
    lines += [f"- {_cell(line)}" for line in g["summary"]]
    nf = g.get("noise_floor")
    if nf:
        lines.append(f"- resolution of the samples (half the 95% interval): {nf['min']:.2%} to {nf['max']:.1%} "
                     f"(widest: {_cell(nf['max_group'])}, {nf['max_metric']})")
    lines += [f"- note: {_cell(n)}" for n in g["notes"]]
    for title, rows in (("Steps", g["step_groups"]), ("Kernels", g["kernel_groups"])):
        paired = [r for r in rows if r.get("metrics")]
        if paired:
            shown, more = _shown(paired)
            lines += ["", f"### {title}", "", *_groups_table(shown, title[:-1].lower())]
            if more:
                lines += ["", f"{more} more unchanged {title[:-1].lower()} groups: see `--format json`."]
        unpaired = [r for r in rows if not r.get("metrics")]
        if unpaired:
            lines += ["", f"{title} without a partner:", ""]
            lines += [f"- {r['status']}: {_cell(r['group'])} ({max(r['n_before'], r['n_after'])})"
                      for r in unpaired[:20]]
            if len(unpaired) > 20:
                lines.append(f"- and {len(unpaired) - 20} more")
    findings = [f for f in d.get("findings") or [] if f["status"] != "same"]
    if findings:
        lines += ["", "### Findings", "", "| finding | status | before | after |", "|---|---|---|---|"]
        for f in findings:
            def side(x: Mapping[str, Any] | None) -> str:
                return "–" if x is None else f"{x['severity']}, {x['steps']} steps"
            lines.append(f"| {_cell(f['id'])} | {f['status']} | {side(f['before'])} | {side(f['after'])} |")
    lines += ["", f"<sub>{_cell(g['method'])}</sub>", ""]
    return "\n".join(lines)

