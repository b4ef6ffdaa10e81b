"""What the regression gate names as the cause of a step or kernel group's change: split-KV newly off, new
latency spikes, the step component that grew."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

# A step component named as what grew only when it grew by at least this share of the step group's change.
COMPONENT_CAUSE_SHARE = 0.5
# Split-KV counts as newly off when the share of launches without it grew by at least this much.
SPLIT_OFF_SHARE_RISE = 0.2


def components(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per component of the steps' wall time (attention, gemm, idle-host, ...): median before / after (ns) and
    the change, largest change first."""
    import statistics

    def per(steps: list[dict[str, Any]]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = defaultdict(list)
        names = {c for s in steps for c in ((s.get("breakdown") or {}).get("components") or {})}
        for s in steps:
            comps = (s.get("breakdown") or {}).get("components") or {}
            for c in names:
                out[c].append(int(comps.get(c) or 0))
        return out

    pb, pa = per(before), per(after)
    rows: list[dict[str, Any]] = []
    for c in set(pb) | set(pa):
        mb = int(statistics.median(pb[c])) if c in pb else 0
        ma = int(statistics.median(pa[c])) if c in pa else 0
        rows.append({"component": c, "before_ns": mb, "after_ns": ma, "delta_ns": ma - mb})
    rows.sort(key=lambda r: -abs(r["delta_ns"]))
    return rows


def _split_counts(steps: Iterable[Mapping[str, Any]]) -> tuple[int, int, list[int]]:
    """(launches, launches with split-KV off, batch sizes of the steps with an off launch)."""
    n = off = 0
    sizes: list[int] = []
    for s in steps:
        has_off = False
        for x in s.get("launches") or []:
            n += 1
            if x.get("split_kv") is False:
                off += 1
                has_off = True
        b = (s.get("batch") or {}).get("batch_size")
        if has_off and b:
            sizes.append(int(b))
    return n, off, sizes


def _b_threshold(doc: Mapping[str, Any], backend: str | None) -> int | None:
    ths = [t.get("b_threshold") for t in doc.get("thresholds") or [] if t.get("backend") == backend]
    ths = [t for t in ths if t]
    return min(ths) if ths else None


def split_cause(before: list[dict[str, Any]], after: list[dict[str, Any]], after_doc: Mapping[str, Any],
                 backend: str | None) -> dict[str, Any] | None:
    nb, ob, _ = _split_counts(before)
    na, oa, sizes = _split_counts(after)
    if not na or not oa or oa / na - (ob / nb if nb else 0) < SPLIT_OFF_SHARE_RISE:
        return None
    bth = _b_threshold(after_doc, backend)
    at = f" at B >= {min(sizes)}" if sizes else ""
    th = f" (B_th = {bth})" if bth else ""
    return {"kind": "split-kv-off", "text": f"split-KV now off{at}{th}: {oa} of {na} attention launches without it "
                                             f"(before {ob} of {nb})"}


def spike_cause(before: list[dict[str, Any]], after: list[dict[str, Any]], before_doc: Mapping[str, Any],
                 after_doc: Mapping[str, Any]) -> dict[str, Any] | None:
    def spikes(steps: list[dict[str, Any]], doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        idx = {s["index"] for s in steps}
        return [f for f in doc.get("findings") or [] if f.get("id") == "latency-spike" and idx & set(f.get("steps")
                                                                                                 or [])]

    sb, sa = spikes(before, before_doc), spikes(after, after_doc)
    if len(sa) <= len(sb):
        return None
    names = {s["index"]: s["name"] for s in after_doc.get("steps") or []}
    new = sa[len(sb):] if sb else sa
    worst = max(new, key=lambda f: (f.get("evidence") or {}).get("excess_ns") or 0)
    ev = worst.get("evidence") or {}
    cause = ev.get("cause") or "unknown"
    detail = f" ({ev['cause_detail']})" if ev.get("cause_detail") else ""
    at = ", ".join(names.get(i, f"#{i}") for i in (worst.get("steps") or [])[:3])
    excess = sum((f.get("evidence") or {}).get("excess_ns") or 0 for f in new)
    return {"kind": "latency-spike", "text": f"{len(sa) - len(sb)} new latency-spike incident(s) (was {len(sb)}); "
                                             f"the worst at {at}, caused by {cause}{detail}",
            "per_step_ns": int(excess / len(after)) if after else None}
