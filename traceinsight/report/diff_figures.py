"""BEFORE and AFTER side by side in the diff's HTML page: latency against batch size overlaid (median step time per
batch size, decode steps), and the two step timelines aligned by step order (the n-th step of each run above each
other), both as inline SVG (matplotlib, no URL). The step time is the one the gate compares (`gate_samples.step_time`:
GPU busy or wall). Inputs are the two analysis documents; times in ns, drawn in ms."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from traceinsight.report.gate_samples import step_time

SIDE_COLOURS = {"before": "#4c78a8", "after": "#e45756"}


def latency_by_batch(doc: Mapping[str, Any], phase: str = "decode", metric: str = "wall") -> list[tuple[int, int, int]]:
    """(batch size, median step time in ns as `metric` counts it, steps) per batch size of the document's `phase`
    steps whose batch size is known exactly."""
    per: dict[int, list[int]] = defaultdict(list)
    for s in doc.get("steps") or []:
        b = (s.get("batch") or {}).get("batch_size")
        if s.get("phase") == phase and b:
            per[int(b)].append(step_time(s, metric))
    return [(b, int(statistics.median(v)), len(v)) for b, v in sorted(per.items())]


def step_series(doc: Mapping[str, Any], metric: str = "wall") -> list[tuple[int, int, str]]:
    """(position, step time in ns as `metric` counts it, phase) of every step in time order."""
    steps = sorted(doc.get("steps") or [], key=lambda s: s["index"])
    return [(i, step_time(s, metric), s.get("phase") or "unknown") for i, s in enumerate(steps)]


LABEL = {"gpu": "GPU busy time", "wall": "wall time"}


def _overlay(series: Mapping[str, list[Any]], height: float, xlabel: str, ylabel: str, title: str,
             label: Callable[[str, list[Any]], str], **line: Any) -> tuple[Any, Any]:
    """A figure with one axes: each side's (x, ns, ...) points as a line in its colour (ns drawn in ms), labelled,
    with a grid and a legend; (figure, axes), for the caller to set the scales."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, height), layout="constrained")
    ax = fig.subplots()
    for side, pts in series.items():
        if pts:
            ax.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], color=SIDE_COLOURS[side], label=label(side, pts),
                    **line)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    return fig, ax


def latency_figure(before: Mapping[str, Any], after: Mapping[str, Any], metric: str = "wall") -> Any | None:
    """Median decode step time against batch size, BEFORE and AFTER on one axes; None without batch sizes."""
    series = {"before": latency_by_batch(before, metric=metric), "after": latency_by_batch(after, metric=metric)}
    if not any(series.values()):
        return None
    fig, ax = _overlay(series, 3.6, "batch size (requests)", f"median decode step, {LABEL[metric]} (ms)",
                       "Latency against batch size", lambda side, pts: f"{side} ({sum(p[2] for p in pts)} steps)",
                       marker="o", markersize=4, linewidth=1.6)
    sizes = sorted({p[0] for pts in series.values() for p in pts})
    if sizes and sizes[-1] >= 4 * sizes[0]:
        ax.set_xscale("log", base=2)
    return fig


def timeline_figure(before: Mapping[str, Any], after: Mapping[str, Any], metric: str = "wall") -> Any | None:
    """Each run's step wall time by step order, the two runs on one axes; None without steps."""
    series = {"before": step_series(before, metric), "after": step_series(after, metric)}
    if not any(series.values()):
        return None
    fig, ax = _overlay(series, 3.4, "step (in time order)", f"step {LABEL[metric]} (ms)",
                       "Step timelines, aligned by step order", lambda side, pts: f"{side} ({len(pts)} steps)",
                       linewidth=1.0, alpha=0.85)
    values = [p[1] for pts in series.values() for p in pts if p[1] > 0]
    if values and max(values) > 20 * min(values):
        ax.set_yscale("log")
    return fig


def side_by_side(before: Mapping[str, Any], after: Mapping[str, Any],
                 metric: str = "wall") -> list[tuple[Any, str, str]]:
    """The diff page's figures of the step time `metric`: (SVG or None, what it shows, why it is missing)."""
    from traceinsight.report.figures import to_svg
    from traceinsight.report.templating import trusted

    return [(None if fig is None else trusted(to_svg(fig)), alt, missing) for fig, alt, missing in (
        (latency_figure(before, after, metric), "median decode step time against batch size, before and after",
         "latency against batch size: not available (no decode step with a known batch size on either side: "
         "give each trace its sidecar with --meta-before / --meta-after)"),
        (timeline_figure(before, after, metric), "step time by step order, before and after",
         "step timelines: not available (no steps on either side)"))]
