"""The cells both renderings of a diff (text, HTML) write: split-KV state, a group's change with its interval, a
signed time."""

from __future__ import annotations

from typing import Any


def split_state(counts: dict[str, int] | None) -> str:
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
    return f"{split_state(k['split_kv']['before'])} -> {split_state(k['split_kv']['after'])}"


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
