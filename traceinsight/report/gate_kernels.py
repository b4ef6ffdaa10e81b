"""The kernel groups of the regression gate: the kernels of one kind on each side, paired by spelling, then by
kind (numbers taken out), then as a path change; with their change, a price per step and its causes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from traceinsight.labels.spelling import kernel_spelling, spelling_kind
from traceinsight.report.gate_causes import split_cause
from traceinsight.report.gate_groups import Thresholds, group_metrics, group_verdict, median_ns, ordered, path_text
from traceinsight.report.gate_samples import KernelKey, KernelSamples

# A second kernel group of one short name shows this many characters of its name from where it differs.
LABEL_ARGS = 60


def _pairs(before: KernelSamples, after: KernelSamples) -> list[tuple[list[KernelKey], list[KernelKey], str]]:
    """Kernel keys paired by spelling, then the rest by kind (numbers taken out); the others new / gone."""
    kb, ka = set(before.durations), set(after.durations)
    out: list[tuple[list[KernelKey], list[KernelKey], str]] = [([k], [k], "paired") for k in sorted(kb & ka)]

    def by_kind(keys: set[KernelKey]) -> dict[KernelKey, list[KernelKey]]:
        d: dict[KernelKey, list[KernelKey]] = defaultdict(list)
        for k in sorted(keys):
            d[(k[0], spelling_kind(k[1]), k[2], k[3])].append(k)
        return d

    rb, ra = by_kind(kb - ka), by_kind(ka - kb)
    left_b: list[KernelKey] = []
    left_a: list[KernelKey] = []
    for kind in sorted(set(rb) | set(ra), key=str):
        b, a = rb.get(kind, []), ra.get(kind, [])
        if b and a:
            out.append((b, a, "paired-by-kind"))
        else:
            (left_a if a else left_b).extend(a or b)
    # An attention phase whose only kernel left on each side changed backend: the same launches on another path.
    for phase in sorted({k[2] for k in left_b if k[0] == "attention"} & {k[2] for k in left_a if k[0] == "attention"},
                        key=str):
        b = [k for k in left_b if k[0] == "attention" and k[2] == phase]
        a = [k for k in left_a if k[0] == "attention" and k[2] == phase]
        if len({k[3] for k in b}) == 1 and len({k[3] for k in a}) == 1 and b[0][3] != a[0][3]:
            out.append((b, a, "path-change"))
            left_b = [k for k in left_b if k not in b]
            left_a = [k for k in left_a if k not in a]
    out += [([k], [], "gone") for k in left_b] + [([], [k], "new") for k in left_a]
    return out


def kernel_groups(before: KernelSamples, after: KernelSamples, steps_before: int, steps_after: int,
                  before_doc: Mapping[str, Any], after_doc: Mapping[str, Any], th: Thresholds) -> list[dict[str, Any]]:
    """Each kernel group of either side: paired (by spelling or by kind; with metrics and a price per step), new
    or gone."""
    rows: list[dict[str, Any]] = []
    seen: dict[str, str] = {}  # label -> the spelling of the first group that took it
    for keys_b, keys_a, status in _pairs(before, after):
        db = [d for k in keys_b for d in before.durations[k]]
        da = [d for k in keys_a for d in after.durations[k]]
        key = (keys_a or keys_b)[0]
        name = after.names.get(keys_a[0]) if keys_a else before.names.get(keys_b[0])
        name = name or key[1]
        label = f"{key[0]} {name}" + (f" {key[2]}" if key[2] else "") + (f" [{key[3]}]" if key[3] else "")
        first = seen.setdefault(label, key[1])
        if first != key[1]:  # another template instance of the same kernel: told apart where the names differ
            at = next((i for i, (x, y) in enumerate(zip(first, key[1], strict=False)) if x != y),
                      min(len(first), len(key[1])))
            start = max(0, at - 8)
            part = key[1][start:start + LABEL_ARGS]
            label += " " + ("…" if start else "") + part + ("…" if start + LABEL_ARGS < len(key[1]) else "")
        row: dict[str, Any] = {"group": label, "family": key[0], "kernel": name, "kind": spelling_kind(key[1]),
                               "phase": key[2], "backend": key[3], "status": status,
                               "n_before": len(db), "n_after": len(da),
                               "per_step_before": _per_step(db, steps_before),
                               "per_step_after": _per_step(da, steps_after), "causes": []}
        if db and da:
            metrics = group_metrics(db, da, th, label, key[0])
            per_step = row["per_step_after"] or 1.0
            delta = (median_ns(da) - median_ns(db)) * per_step
            row.update({"metrics": metrics, "verdict": group_verdict(metrics), "per_step_ns": int(delta)})
            if status == "path-change":
                row["causes"].append({"kind": "path-change", "per_step_ns": int(delta),
                                      "text": f"attention path {path_text(keys_b[0][3])} -> {path_text(keys_a[0][3])}"})
                row["group"] = f"{label} (was {before.names.get(keys_b[0]) or keys_b[0][1]} [{keys_b[0][3]}])"
            if key[0] == "attention":
                split = _split_cause_launches(key, {k[1] for k in keys_b + keys_a}, before_doc, after_doc)
                if split:
                    split["per_step_ns"] = int(delta)
                    row["causes"].append(split)
        else:
            row.update({"metrics": None, "verdict": None,
                        "per_step_ns": int(sum(da) / steps_after if da and steps_after else
                                           -sum(db) / steps_before if db and steps_before else 0)})
        rows.append(row)
    return ordered(rows)


def _per_step(durs: list[int] | None, steps: int) -> float | None:
    return round(len(durs) / steps, 3) if durs and steps else None


def _split_cause_launches(key: KernelKey, spellings: set[str], before_doc: Mapping[str, Any],
                          after_doc: Mapping[str, Any]) -> dict[str, Any] | None:
    def steps_of(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
        out = []
        for s in doc.get("steps") or []:
            ls = [x for x in s.get("launches") or [] if x.get("phase") == key[2] and x.get("backend") == key[3]
                  and kernel_spelling(x.get("name") or x.get("kernel") or "") in spellings]
            if ls:
                out.append({**s, "launches": ls})
        return out

    return split_cause(steps_of(before_doc), steps_of(after_doc), after_doc, key[3])
