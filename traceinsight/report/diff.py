"""Compare two analyses (BEFORE, AFTER): per kernel family, per attention kernel (time, split-KV state), per
threshold and per finding (new, gone, changed), from their JSON documents. `diff_docs` gives the JSON
document `traceinsight.diff/1`; `render_text` (here) / `diff_html.render_html` lay it out. Times in ns; a ratio
is after / before.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any, cast

import orjson

from traceinsight.diagnose.finding import severity_rank
from traceinsight.errors import FormatError, InputError
from traceinsight.report.gate import KernelSamples, Thresholds, gate, gate_lines
from traceinsight.report.json_doc import step_summary

SCHEMA = "traceinsight.diff/1"
ANALYSIS_SCHEMA = re.compile(rb'"schema"\s*:\s*"traceinsight\.analys(?:is|es)/1"')

# Relative change in time below which a kernel or family counts as unchanged (noise between runs).
UNCHANGED_RATIO = 0.05
ATTENTION_FAMILIES = ("attention", "merge", "prepare")


# --- loading ------------------------------------------------------------------------------------------------

def is_analysis_json(path: Path) -> bool:
    """Whether `path` holds a traceinsight analysis document (plain or gzipped JSON), not a trace."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
            fh.seek(0)
            raw = gzip.open(fh).read(512) if head == b"\x1f\x8b" else fh.read(512)  # noqa: SIM115
    except (OSError, EOFError):
        return False
    return bool(ANALYSIS_SCHEMA.search(raw))


def load_analysis_json(path: Path) -> dict[str, Any]:
    """The (single) analysis document stored at `path`."""
    try:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        doc: dict[str, Any] = orjson.loads(data)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (orjson.JSONDecodeError, EOFError, gzip.BadGzipFile) as exc:
        raise FormatError(f"{path}: damaged analysis JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise FormatError(f"{path}: a JSON {type(doc).__name__}, not a traceinsight document")
    if doc.get("schema") == "traceinsight.analyses/1":
        traces = doc.get("traces") or []
        if len(traces) != 1:
            raise FormatError(f"{path}: holds {len(traces)} analyses; diff compares one trace with one trace")
        doc = traces[0]
    return doc


# --- comparing ----------------------------------------------------------------------------------------------

def _ratio(before: float | None, after: float | None) -> float | None:
    if not before or after is None:
        return None
    return after / before


def _status(before: Any, after: Any, before_ns: float | None = None, after_ns: float | None = None) -> str:
    if before is None:
        return "new"
    if after is None:
        return "gone"
    r = _ratio(before_ns, after_ns)
    if r is not None and abs(r - 1) > UNCHANGED_RATIO:
        return "slower" if r > 1 else "faster"
    return "same"


def _summary(doc: dict[str, Any]) -> dict[str, Any]:
    """The document's `step_summary` (every step, even when the document holds only the steps that matter); for
    a document written before it existed, the same figures from its steps."""
    got = doc.get("step_summary")
    if got is None:
        got = doc["step_summary"] = step_summary(
            (s["dur_ns"], s["attention_ns"], [(x["kernel"], x.get("backend"), x.get("split_kv"))
                                              for x in s["launches"]]) for s in doc.get("steps") or [])
    return cast(dict[str, Any], got)


def _step_stats(doc: dict[str, Any]) -> dict[str, Any]:
    s = _summary(doc)
    return {k: s[k] for k in ("count", "total_ns", "attention_ns", "median_ns", "max_ns", "split_kv")}


def _families(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    def index(doc: dict[str, Any]) -> dict[tuple[str, str | None], dict[str, Any]]:
        return {(f["family"], f.get("backend")): f for f in doc.get("families") or []}

    b, a = index(before), index(after)
    rows = []
    for key in sorted(set(b) | set(a), key=lambda k: -max((b.get(k) or {}).get("total_ns", 0),
                                                             (a.get(k) or {}).get("total_ns", 0))):
        fb, fa = b.get(key), a.get(key)
        bn, an = (fb or {}).get("total_ns"), (fa or {}).get("total_ns")
        rows.append({"family": key[0], "backend": key[1], "status": _status(fb, fa, _mean(fb), _mean(fa)),
                     "before_ns": bn, "after_ns": an, "delta_ns": (an or 0) - (bn or 0), "ratio": _ratio(bn, an),
                     "before_count": (fb or {}).get("count"), "after_count": (fa or {}).get("count")})
    return rows


def _mean(row: dict[str, Any] | None) -> float | None:
    """Mean time per kernel execution of a families/kernels row (ns)."""
    if not row or not row.get("count"):
        return None
    mean: float = (row.get("total_ns") or 0) / row["count"]
    return mean


def _launch_split(doc: dict[str, Any]) -> dict[tuple[str, str | None], dict[str, int]]:
    return {(r["kernel"], r.get("backend")): {k: r[k] for k in ("on", "off", "unknown")}
            for r in _summary(doc)["split_kv_by_kernel"]}


def _kernels(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    def index(doc: dict[str, Any]) -> dict[tuple[str, str | None], dict[str, Any]]:
        out: dict[tuple[str, str | None], dict[str, Any]] = {}
        for k in doc.get("kernels") or []:
            if k.get("family") not in ATTENTION_FAMILIES:
                continue
            key = (k["kernel"], k.get("backend"))
            cur = out.setdefault(key, {"family": k["family"], "count": 0, "total_ns": 0, "max_ns": 0,
                                       "grids": []})
            cur["count"] += k.get("count") or 0
            cur["total_ns"] += k.get("total_ns") or 0
            cur["max_ns"] = max(cur["max_ns"], k.get("max_ns") or 0)
            cur["grids"] += [g for g in k.get("grids") or [] if g not in cur["grids"]]
        for v in out.values():
            v["mean_ns"] = v["total_ns"] // v["count"] if v["count"] else None
        return out

    b, a = index(before), index(after)
    sb, sa = _launch_split(before), _launch_split(after)
    rows = []
    for key in sorted(set(b) | set(a), key=lambda k: -max((b.get(k) or {}).get("total_ns", 0),
                                                             (a.get(k) or {}).get("total_ns", 0))):
        kb, ka = b.get(key), a.get(key)
        bn, an = (kb or {}).get("total_ns"), (ka or {}).get("total_ns")
        split_b, split_a = sb.get(key), sa.get(key)
        rows.append({
            "kernel": key[0], "backend": key[1], "family": (kb or ka or {}).get("family"),
            "status": _status(kb, ka, (kb or {}).get("mean_ns"), (ka or {}).get("mean_ns")),
            "before": kb, "after": ka, "delta_ns": (an or 0) - (bn or 0),
            "mean_ratio": _ratio((kb or {}).get("mean_ns"), (ka or {}).get("mean_ns")),
            "split_kv": {"before": split_b, "after": split_a,  # attention launches only (None otherwise)
                         "changed": bool(split_b and split_a and _split_state(split_b) != _split_state(split_a))},
        })
    return rows


def _split_state(counts: dict[str, int] | None) -> str:
    """'on' / 'off' / 'mixed' / 'unknown' for a kernel's launches."""
    if not counts:
        return "unknown"
    states = [k for k in ("on", "off") if counts.get(k)]
    if len(states) == 2:
        return "mixed"
    return states[0] if states else "unknown"


def split_pair(k: dict[str, Any]) -> str:
    if k.get("family") != "attention":
        return "-"
    return f"{_split_state(k['split_kv']['before'])} -> {_split_state(k['split_kv']['after'])}"


def _thresholds(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    fields = ("occupancy", "max_grid", "b_threshold")

    def index(doc: dict[str, Any]) -> dict[tuple[Any, ...], dict[str, Any]]:
        return {(t.get("kernel"), t.get("backend"), t.get("kv_heads")): t for t in doc.get("thresholds") or []}

    b, a = index(before), index(after)
    rows = []
    for key in sorted(set(b) | set(a), key=str):
        tb, ta = b.get(key), a.get(key)
        changed = [f for f in fields if tb and ta and tb.get(f) != ta.get(f)]
        rows.append({"kernel": key[0], "backend": key[1], "kv_heads": key[2],
                     "status": "new" if tb is None else "gone" if ta is None else "changed" if changed else "same",
                     "changed": changed, "before": {f: tb.get(f) for f in fields} if tb else None,
                     "after": {f: ta.get(f) for f in fields} if ta else None})
    return rows


def _finding_groups(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    names = {s["index"]: s["name"] for s in doc.get("steps") or []}
    out: dict[str, dict[str, Any]] = {}
    for f in doc.get("findings") or []:
        g = out.setdefault(f["id"], {"severity": f.get("severity"), "count": 0, "steps": set(), "saving_ns": None,
                                     "summaries": [], "step_names": set()})
        g["step_names"].update(names.get(i, f"#{i}") for i in f.get("steps") or [])
        if severity_rank(f.get("severity")) < severity_rank(g["severity"]):
            g["severity"] = f.get("severity")
        g["count"] += 1
        g["steps"].update(f.get("steps") or [])
        if f.get("saving_ns") is not None:
            g["saving_ns"] = (g["saving_ns"] or 0) + f["saving_ns"]
        g["summaries"].append(f.get("summary", ""))
    for g in out.values():
        g["steps"] = len(g["steps"])
        g["step_names"] = sorted(g["step_names"])
    return out


def _finding_changes(gb: dict[str, Any], ga: dict[str, Any]) -> list[str]:
    """What differs between the two sides of one rule's findings: severity, how many, which steps (by name),
    the saving (beyond UNCHANGED_RATIO) or what the summaries say."""
    changes = []
    if gb["severity"] != ga["severity"]:
        changes.append("severity")
    if gb["count"] != ga["count"]:
        changes.append("count")
    if gb["steps"] != ga["steps"] or gb.get("step_names") != ga.get("step_names"):
        changes.append("steps")
    sb, sa = gb.get("saving_ns"), ga.get("saving_ns")
    if (sb is None) != (sa is None) or (sb and sa and abs(sa / sb - 1) > UNCHANGED_RATIO):
        changes.append("saving")
    if sorted(gb["summaries"]) != sorted(ga["summaries"]):
        changes.append("summary")
    return changes


def _findings(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    b, a = _finding_groups(before), _finding_groups(after)
    rows: list[dict[str, Any]] = []
    for fid in set(b) | set(a):
        gb, ga = b.get(fid), a.get(fid)
        if gb is None:
            status = "new"
        elif ga is None:
            status = "gone"
        elif _finding_changes(gb, ga):
            status = "changed"
        else:
            status = "same"
        rows.append({"id": fid, "status": status, "before": gb, "after": ga,
                     "changed": _finding_changes(gb, ga) if gb and ga else []})
    order = {"new": 0, "changed": 1, "gone": 2, "same": 3}
    rows.sort(key=lambda r: (order[r["status"]], severity_rank((r["after"] or r["before"])["severity"]),
                             r["id"]))
    return rows


# Below this share of step names in common, BEFORE and AFTER count as different workloads.
SAME_WORKLOAD_SHARE = 0.5
# Matched steps listed in the diff at most (those whose time changed the most).
MATCHED_STEPS_SHOWN = 20


def _steps_by_name(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Steps matched by name (the n-th step of a name with the n-th of the same name on the other side): how many
    match, how many are only on one side, the median ratio of matched steps' wall time (after / before), the
    matched steps whose time changed the most, and whether the workloads differ (fewer than SAME_WORKLOAD_SHARE
    of either side's steps matched, or different GPUs), with the reason in words."""
    def keyed(doc: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
        seen: dict[str, int] = {}
        out = {}
        for s in doc.get("steps") or []:
            n = seen[s["name"]] = seen.get(s["name"], -1) + 1
            out[(s["name"], n)] = s
        return out

    b, a = keyed(before), keyed(after)
    common = [k for k in b if k in a]
    pairs = []
    for k in common:
        wb, wa = b[k].get("wall_ns", b[k]["dur_ns"]), a[k].get("wall_ns", a[k]["dur_ns"])
        pairs.append({"name": k[0], "before_index": b[k]["index"], "after_index": a[k]["index"],
                      "before_ns": wb, "after_ns": wa, "ratio": _ratio(wb, wa)})
    ratios = sorted(p["ratio"] for p in pairs if p["ratio"] is not None)
    pairs.sort(key=lambda p: -abs((p["after_ns"] or 0) - (p["before_ns"] or 0)))
    reasons = []
    for side, doc, n in (("before", before, len(b)), ("after", after, len(a))):
        total = _summary(doc)["count"] or n
        if total and len(common) < SAME_WORKLOAD_SHARE * min(total, n or total):
            names = ", ".join(repr(k[0]) for k in list(b if side == "before" else a)[:2])
            reasons.append(f"only {len(common)} of {side}'s {n} steps have a step of the same name on the other "
                           f"side ({side}: {names})")
    gb, ga = _trace(before).get("gpu"), _trace(after).get("gpu")
    if gb and ga and gb != ga:
        reasons.append(f"different GPUs ({gb} vs {ga})")
    partial = [f"{side} holds {n} of its {total} steps (the steps that matter)"
               for side, doc, n in (("before", before, len(b)), ("after", after, len(a)))
               if (total := _summary(doc)["count"] or n) > n]
    return {"matched": len(common), "before_only": len(b) - len(common), "after_only": len(a) - len(common),
            "median_ratio": ratios[len(ratios) // 2] if ratios else None,
            "changed": pairs[:MATCHED_STEPS_SHOWN], "workloads_differ": bool(reasons), "why": reasons,
            "partial": partial}


def _trace(doc: dict[str, Any]) -> dict[str, Any]:
    tr = doc.get("trace") or {}
    return {"path": tr.get("path"), "format": tr.get("format"), "gpu": (tr.get("gpu") or {}).get("name")}


def diff_docs(before: dict[str, Any], after: dict[str, Any], samples_before: KernelSamples | None = None,
              samples_after: KernelSamples | None = None, thresholds: Thresholds | None = None) -> dict[str, Any]:
    """The diff of two analysis documents (schema traceinsight.diff/1), with the regression gate (`gate`: groups
    paired by kind, report/gate.py) over the kernel execution times `samples_*` when the inputs were traces."""
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "before": _trace(before),
        "after": _trace(after),
        "steps": {"before": _step_stats(before), "after": _step_stats(after)},
        "families": _families(before, after),
        "kernels": _kernels(before, after),
        "thresholds": _thresholds(before, after),
        "findings": _findings(before, after),
        "matched_steps": _steps_by_name(before, after),
        "gate": gate(before, after, samples_before, samples_after, thresholds or Thresholds()),
    }
    doc["gate"]["summary"] = gate_lines(doc["gate"])
    doc["summary"] = headline(doc)
    return doc


def headline(d: dict[str, Any]) -> list[str]:
    """The changes worth a line each, most important first."""
    from traceinsight.units import fmt_ns

    lines = []
    m = d.get("matched_steps") or {}
    if m.get("workloads_differ"):
        lines.append("the workloads differ: " + "; ".join(m["why"]) + ": totals and medians compare different work")
    matched = ""
    if m.get("matched"):
        mr = m.get("median_ratio")
        matched = f"; {m['matched']} matched by name" + (f", each {mr - 1:+.0%} at the median" if mr else "")
    sb, sa = d["steps"]["before"], d["steps"]["after"]
    if sb["count"] and sa["count"]:
        r = _ratio(sb["median_ns"], sa["median_ns"])
        lines.append(f"median step {fmt_ns(sb['median_ns'])} -> {fmt_ns(sa['median_ns'])}"
                     + (f" ({r - 1:+.0%})" if r else "") + f"; steps {sb['count']} -> {sa['count']}{matched}")
    for f in d["findings"]:
        if f["status"] == "new":
            lines.append(f"new finding {f['id']} ({f['after']['severity']}, {f['after']['steps']} steps)")
        elif f["status"] == "gone":
            lines.append(f"finding {f['id']} is gone (was {f['before']['severity']}, {f['before']['steps']} steps)")
        elif f["status"] == "changed":
            b, a = f["before"], f["after"]
            lines.append(f"finding {f['id']} changed ({', '.join(f.get('changed') or [])}): {b['severity']} in "
                         f"{b['steps']} steps -> {a['severity']} in {a['steps']} steps")
    for k in d["kernels"]:
        if k["split_kv"]["changed"]:
            lines.append(f"{k['kernel']}: split-KV {_split_state(k['split_kv']['before'])} -> "
                         f"{_split_state(k['split_kv']['after'])}")
        if k["status"] in ("new", "gone"):
            lines.append(f"kernel {k['kernel']} [{k['backend']}] {'appears' if k['status'] == 'new' else 'is gone'}")
        elif k["status"] in ("slower", "faster") and k["mean_ratio"]:
            lines.append(f"{k['kernel']} [{k['backend']}] {k['status']}: mean "
                         f"{fmt_ns(k['before']['mean_ns'])} -> {fmt_ns(k['after']['mean_ns'])} "
                         f"({k['mean_ratio'] - 1:+.0%})")
    for t in d["thresholds"]:
        if t["status"] == "changed":
            lines.append(f"threshold of {t['kernel']} (H_kv={t['kv_heads']}): "
                         + ", ".join(f"{c} {t['before'][c]} -> {t['after'][c]}" for c in t["changed"]))
        elif t["status"] in ("new", "gone"):
            side = t["after"] if t["status"] == "new" else t["before"]
            lines.append(f"threshold of {t['kernel']} {t['status']} (B_th={side['b_threshold'] or '-'})")
    if m.get("partial"):  # a caveat, last
        lines.append("steps matched by name among the steps the documents hold: " + "; ".join(m["partial"])
                     + " (diff the traces, `analyze --save` folders or `--steps all` documents for every step)")
    return lines


# --- rendering ----------------------------------------------------------------------------------------------

def render_text(d: dict[str, Any], console: Any) -> None:
    """Print the diff with rich: headline, then families, kernels, thresholds, findings tables."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from traceinsight.units import fmt_ns

    style = {"new": "bold red", "gone": "green", "slower": "red", "faster": "green", "changed": "yellow",
             "same": "dim"}

    def table(title: str, cols: list[str], right: set[str]) -> Table:
        t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", title_style="bold", padding=(0, 1),
                  pad_edge=False, show_edge=False)
        for c in cols:
            t.add_column(c, justify="right" if c in right else "left")
        return t

    console.print(Text(f"before: {d['before']['path']}\nafter:  {d['after']['path']}", style="bold"))
    if d["summary"]:
        console.print()
        for line in d["summary"]:
            console.print(Text(f" • {line}"))
    g = d["gate"]
    console.print()
    console.print(Text("Regression gate", style="bold"))
    for line in g["summary"] + [f"note: {n}" for n in g["notes"]]:
        console.print(Text(f" • {line}"))
    gt = table("Step and kernel groups (paired by kind; change of median and p90 [95% CI])",
               ["group", "verdict", "n", "median", "p90", "per step", "cause"], {"n", "per step"})
    gt.columns[0].min_width = 36  # the group names the change; the numbers can wrap first
    gt.columns[0].overflow = "fold"
    for row in g["step_groups"] + g["kernel_groups"]:
        if not row["metrics"]:
            continue
        v = row["verdict"] + (" (path)" if row["status"] == "path-change" else "")
        gt.add_row(Text(row["group"]), Text(v, style=_VERDICT_STYLE.get(row["verdict"], "")),
                   f"{row['n_before']}->{row['n_after']}", *(Text(metric_cell(row, m)) for m in ("median", "p90")),
                   signed_ns(row["per_step_ns"]), Text("; ".join(c["text"] for c in row["causes"]) or "-"))
    ft = table("Findings", ["id", "status", "before", "after"], set())
    for f in d["findings"]:
        def side(g: dict[str, Any] | None) -> str:
            return "-" if g is None else f"{g['severity']}, {g['steps']} steps" + (
                f", saves {fmt_ns(g['saving_ns'])}" if g.get("saving_ns") else "")
        ft.add_row(f["id"], Text(f["status"], style=style.get(f["status"], "")), side(f["before"]), side(f["after"]))
    kt = table("Attention kernels", ["kernel", "backend", "status", "count", "mean", "total", "Δ total", "split-KV"],
               {"count", "mean", "total", "Δ total"})
    for k in d["kernels"]:
        b, a = k["before"] or {}, k["after"] or {}
        kt.add_row(k["kernel"], k["backend"] or "-", Text(k["status"], style=style.get(k["status"], "")),
                   f"{b.get('count', '-')} -> {a.get('count', '-')}",
                   f"{fmt_ns(b.get('mean_ns'))} -> {fmt_ns(a.get('mean_ns'))}",
                   f"{fmt_ns(b.get('total_ns'))} -> {fmt_ns(a.get('total_ns'))}", fmt_ns(k["delta_ns"]),
                   split_pair(k))
    famt = table("Kernel time by family", ["family", "backend", "status", "before", "after", "Δ"],
                 {"before", "after", "Δ"})
    for f in d["families"]:
        famt.add_row(f["family"], f["backend"] or "-", Text(f["status"], style=style.get(f["status"], "")),
                     fmt_ns(f["before_ns"]), fmt_ns(f["after_ns"]), fmt_ns(f["delta_ns"]))
    tt = table("Split-KV thresholds", ["kernel", "backend", "H_kv", "status", "CTAs/SM", "max grid", "B_th"],
               {"H_kv", "CTAs/SM", "max grid", "B_th"})
    for t in d["thresholds"]:
        b, a = t["before"] or {}, t["after"] or {}
        tt.add_row(str(t["kernel"]), t["backend"] or "-", str(t["kv_heads"]),
                   Text(t["status"], style=style.get(t["status"], "")),
                   *(f"{b.get(c) or '-'} -> {a.get(c) or '-'}" for c in ("occupancy", "max_grid", "b_threshold")))
    for t in (gt, ft, kt, famt, tt):
        if t.row_count:
            console.print()
            console.print(t)


_VERDICT_STYLE = {"regressed": "bold red", "improved": "green", "unchanged": "dim"}


def metric_cell(row: dict[str, Any], m: str) -> str:
    v = (row.get("metrics") or {}).get(m) or {}
    if v.get("change") is None:
        return "-"
    if v.get("ci_low") is None:
        return f"{v['change']:+.1%} (n<5)"
    return f"{v['change']:+.1%} [{v['ci_low']:+.1%}, {v['ci_high']:+.1%}]"


def signed_ns(ns: int | None) -> str:
    from traceinsight.units import fmt_ns

    if ns is None:
        return "-"
    return ("+" if ns > 0 else "-" if ns < 0 else "") + fmt_ns(abs(ns))
