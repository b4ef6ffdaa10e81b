"""BEFORE and AFTER side by side in the diff's HTML page: latency against batch size overlaid (median step wall time
per batch size, decode steps), and the two step timelines aligned by step order (the n-th step of each run above
each other), both as inline SVG (matplotlib, no URL). Inputs are the two analysis documents; times in ns, drawn in
ms."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

SIDE_COLOURS = {"before": "#4c78a8", "after": "#e45756"}


def latency_by_batch(doc: Mapping[str, Any], phase: str = "decode") -> list[tuple[int, int, int]]:
    """(batch size, median step wall time in ns, steps) per batch size of the document's `phase` steps whose batch
    size is known exactly."""
    per: dict[int, list[int]] = defaultdict(list)
    for s in doc.get("steps") or []:
        b = (s.get("batch") or {}).get("batch_size")
        if s.get("phase") == phase and b:
            per[int(b)].append(int(s.get("wall_ns") or s["dur_ns"]))
    return [(b, int(statistics.median(v)), len(v)) for b, v in sorted(per.items())]


def step_series(doc: Mapping[str, Any]) -> list[tuple[int, int, str]]:
    """(position, wall time in ns, phase) of every step in time order."""
    steps = sorted(doc.get("steps") or [], key=lambda s: s["index"])
    return [(i, int(s.get("wall_ns") or s["dur_ns"]), s.get("phase") or "unknown") for i, s in enumerate(steps)]


def latency_figure(before: Mapping[str, Any], after: Mapping[str, Any]) -> Any | None:
    """Median decode step time against batch size, BEFORE and AFTER on one axes; None without batch sizes."""
    from matplotlib.figure import Figure

    series = {"before": latency_by_batch(before), "after": latency_by_batch(after)}
    if not any(series.values()):
        return None
    fig = Figure(figsize=(9, 3.6), layout="constrained")
    ax = fig.subplots()
    for side, pts in series.items():
        if pts:
            ax.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], marker="o", markersize=4, linewidth=1.6,
                    color=SIDE_COLOURS[side], label=f"{side} ({sum(p[2] for p in pts)} steps)")
    sizes = sorted({p[0] for pts in series.values() for p in pts})
    if sizes and sizes[-1] >= 4 * sizes[0]:
        ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size (requests)")
    ax.set_ylabel("median decode step (ms)")
    ax.set_title("Latency against batch size", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    return fig


def timeline_figure(before: Mapping[str, Any], after: Mapping[str, Any]) -> Any | None:
    """Each run's step wall time by step order, the two runs on one axes; None without steps."""
    from matplotlib.figure import Figure

    series = {"before": step_series(before), "after": step_series(after)}
    if not any(series.values()):
        return None
    fig = Figure(figsize=(9, 3.4), layout="constrained")
    ax = fig.subplots()
    for side, pts in series.items():
        if pts:
            ax.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], linewidth=1.0, color=SIDE_COLOURS[side],
                    label=f"{side} ({len(pts)} steps)", alpha=0.85)
    values = [p[1] for pts in series.values() for p in pts if p[1] > 0]
    if values and max(values) > 20 * min(values):
        ax.set_yscale("log")
    ax.set_xlabel("step (in time order)")
    ax.set_ylabel("step wall time (ms)")
    ax.set_title("Step timelines, aligned by step order", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    return fig


def side_by_side_html(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """The section of the diff page with both figures (or what is missing)."""
    from traceinsight.report.figures import to_svg
    from traceinsight.report.html import esc

    parts = ['<section data-section="side-by-side"><h2>Side by side</h2>']
    for fig, alt, missing in (
            (latency_figure(before, after), "median decode step time against batch size, before and after",
             "latency against batch size: not available (no decode step with a known batch size on either side: "
             "give each trace its sidecar with --meta-before / --meta-after)"),
            (timeline_figure(before, after), "step wall time by step order, before and after",
             "step timelines: not available (no steps on either side)")):
        if fig is None:
            parts.append(f'<p class="na">{esc(missing)}</p>')
        else:
            parts.append(f'<figure role="img" aria-label="{esc(alt)}">{to_svg(fig)}</figure>')
    parts.append("</section>")
    return "".join(parts)
