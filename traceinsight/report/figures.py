"""Static plots for the reports (matplotlib, Agg): the step-time timeline with spikes coloured by cause, latency vs
batch size per KV-length distribution with B_th drawn, and the simulated per-SM Gantt of one launch. Each
`*_figure` function returns a matplotlib Figure; `to_svg` / `to_png` serialise it (the SVG has no external
reference, so it can be inlined in an offline HTML page). Inputs are the data of the report sections
(`report.timeline`, `report.sweep_view`); times in ns, plotted in ms.
"""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING, Any

import matplotlib
from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global figure registry, faster import
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

# The Gantt as data lives in gantt.py (made there without matplotlib); importable from here as before.
from traceinsight.report.gantt import Gantt as Gantt
from traceinsight.report.gantt import Segment as Segment
from traceinsight.report.gantt import gantt_from_sim as gantt_from_sim
from traceinsight.report.gantt import tail_notes as tail_notes

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.typing import RcKeyType

    from traceinsight.model.sweep import SweepPanel
    from traceinsight.report.timeline import IncidentRow, TimelinePoint

# Colour of each finding id (a spike's cause); anything else gets CAUSE_OTHER.
CAUSE_COLOURS = {
    "split-kv-off": "#d62728",
    "split-kv-starved": "#ff7f0e",
    "tail-ctas": "#9467bd",
    "sm-idle": "#8c564b",
    "decode-on-prefill-kernel": "#e377c2",
    "slow-path": "#bcbd22",
    "wave-quantization": "#17becf",
    "kv-bandwidth": "#1f77b4",
    "gpu-idle-gaps": "#7f7f7f",
}
CAUSE_OTHER = "#111111"
# Colour of each step-breakdown component (model/breakdown.py); other kernel families get COMPONENT_OTHER.
COMPONENT_COLOURS = {
    "attention": "#d62728",
    "prefill": "#ff7f0e",
    "gemm": "#4c78a8",
    "norm": "#72b7b2",
    "elementwise": "#54a24b",
    "communication": "#b279a2",
    "moe": "#e377c2",
    "memory": "#9d755d",
    "other": "#bab0ac",
    "idle-host": "#f2cf5b",
    "idle-wait": "#8a8a8a",
    "idle-unknown": "#d3d3d3",
}
COMPONENT_OTHER = "#c7c7c7"
DIST_COLOURS = ["#1f77b4", "#ff7f0e", "#d62728", "#8c2d04", "#2ca02c", "#9467bd", "#17becf", "#7f7f7f"]
BASE = "#9aa5b1"
TAIL = "#d62728"
BUSY = "#4c78a8"

_STYLE: dict[RcKeyType, Any] = {
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Helvetica", "Arial"],
    "font.size": 9.5,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.labelsize": 9.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": "#555555",
    "axes.grid": True,
    "grid.color": "#e4e7eb",
    "grid.linewidth": 0.8,
    "legend.frameon": False,
    "legend.fontsize": 8.5,
    "svg.fonttype": "none",  # text stays text: small, crisp, selectable
    "svg.hashsalt": "traceinsight",  # stable ids, so reports of the same trace are identical
}


def _ms(ns: float) -> float:
    return ns / 1e6


def _ms_label(v: float, _pos: object = None) -> str:
    if v >= 10:
        return f"{v:.0f}"
    if v >= 1:
        return f"{v:.1f}".rstrip("0").rstrip(".")
    return f"{v:.2g}"


def _new(width_in: float, height_in: float, ncols: int = 1) -> tuple[Figure, list[Axes]]:
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(width_in, height_in), layout="constrained")
        axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _log_ms_axis(ax: Axes, values_ms: list[float]) -> None:
    lo, hi = min(values_ms), max(values_ms)
    if lo > 0 and hi / lo > 12:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(_ms_label))


# --- timeline -----------------------------------------------------------------------------------------------

def timeline_figure(points: list[TimelinePoint], title: str = "Step time") -> Figure:
    """Step time per step (in trace order); spikes as large markers coloured by their cause."""
    with matplotlib.rc_context(_STYLE):
        fig, (ax,) = _new(10.5, 3.4)
        xs = [p.index for p in points]
        ys = [_ms(p.dur_ns) for p in points]
        many = len(points) > 3000
        ax.plot(xs, ys, color=BASE, linewidth=0.7, zorder=1, rasterized=many)
        ax.scatter(xs, ys, s=6 if not many else 2, color=BASE, zorder=2, rasterized=many, linewidths=0)
        causes: dict[str, list[TimelinePoint]] = {}
        for p in points:
            if p.spike:
                causes.setdefault(p.cause or "unexplained", []).append(p)
        handles = [Line2D([], [], color=BASE, marker="o", markersize=3, linewidth=0.7, label="step")]
        for cause, pts in sorted(causes.items(), key=lambda kv: -len(kv[1])):
            colour = CAUSE_COLOURS.get(cause, CAUSE_OTHER)
            ax.scatter([p.index for p in pts], [_ms(p.dur_ns) for p in pts], s=34, color=colour, zorder=3,
                       edgecolors="white", linewidths=0.6)
            handles.append(Line2D([], [], color=colour, marker="o", linestyle="", markersize=6,
                                  label=f"spike: {cause} ({len(pts)})"))
        if ys:
            _log_ms_axis(ax, ys)
        ax.set_xlabel("step (trace order)")
        ax.set_ylabel("step time (ms)")
        ax.set_title(title)
        ax.margins(x=0.01)
        ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=min(4, len(handles)),
                  borderaxespad=0.2)
    return fig


# --- breakdown ----------------------------------------------------------------------------------------------

def breakdown_figure(rows: list[IncidentRow]) -> Figure:
    """Per incident, two stacked bars: the mean step against its baseline, split by component (ms)."""
    with matplotlib.rc_context(_STYLE):
        fig, (ax,) = _new(10.5, 0.55 + 0.62 * max(1, len(rows)))
        names: list[str] = []
        for r in rows:
            for p in r.parts:
                if p["component"] not in names and (p["step_ns"] > 0 or p["baseline_ns"] > 0):
                    names.append(p["component"])
        labels = []
        y = 0.0
        ticks = []
        for r in reversed(rows):
            by = {p["component"]: p for p in r.parts}
            for which, key in (("baseline", "baseline_ns"), (f"{r.label}: {r.cause}", "step_ns")):
                left = 0.0
                for c in names:
                    v = _ms(max(0.0, by.get(c, {}).get(key, 0.0)))
                    if v > 0:
                        ax.barh(y, v, left=left, height=0.8, color=COMPONENT_COLOURS.get(c, COMPONENT_OTHER),
                                edgecolor="white", linewidth=0.4)
                    left += v
                labels.append(which)
                ticks.append(y)
                y += 1
            y += 0.6
        ax.set_yticks(ticks, labels)
        ax.xaxis.set_major_formatter(FuncFormatter(_ms_label))
        ax.set_xlabel("mean time per step of the incident (ms)")
        ax.set_title("Where the spikes' time went, against their baseline steps")
        ax.grid(axis="y", visible=False)
        handles = [Patch(color=COMPONENT_COLOURS.get(c, COMPONENT_OTHER), label=c) for c in names]
        ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=min(6, len(handles)) or 1,
                  borderaxespad=0.2)
    return fig


# --- sweep --------------------------------------------------------------------------------------------------

def sweep_figure(panels: list[SweepPanel]) -> Figure:
    """Latency vs batch size, one line per distribution, one panel per sweep; B_th as a vertical line.
    Filled markers: split-KV on; crosses: every launch of the case ran split-KV off."""
    with matplotlib.rc_context(_STYLE):
        n = len(panels)
        fig, axes = _new(min(5.6 * n, 12.0), 3.9, ncols=n)
        dists = []
        for p in panels:
            for s in p.series:
                if s.dist not in dists:
                    dists.append(s.dist)
        colour = {d: DIST_COLOURS[i % len(DIST_COLOURS)] for i, d in enumerate(dists)}
        for ax, p in zip(axes, panels, strict=True):
            all_ms = []
            flags = {o for s in p.series for o in s.split_off}
            mark_off = flags == {True, False}  # a backend that never splits is off everywhere: no marks
            for s in p.series:
                ms = [_ms(v) for v in s.median_ns]
                all_ms += ms
                ax.plot(s.batch, ms, color=colour[s.dist], linewidth=1.6, label=s.dist, zorder=2)
                on = [(b, m) for b, m, o in zip(s.batch, ms, s.split_off, strict=True) if not (o and mark_off)]
                off = [(b, m) for b, m, o in zip(s.batch, ms, s.split_off, strict=True) if o and mark_off]
                if on:
                    on_b, on_ms = zip(*on, strict=True)
                    ax.scatter(on_b, on_ms, s=16, color=colour[s.dist], zorder=3, linewidths=0)
                if off:
                    off_b, off_ms = zip(*off, strict=True)
                    ax.scatter(off_b, off_ms, s=34, color=colour[s.dist], marker="X", zorder=3,
                               edgecolors="white", linewidths=0.5)
            ax.set_xscale("log", base=2)
            sizes = p.batch_sizes
            ticks = [b for b in sizes if b & (b - 1) == 0] or sizes
            ax.set_xticks(ticks, [str(b) for b in ticks])
            ax.xaxis.set_minor_formatter(NullFormatter())
            if all_ms:
                _log_ms_axis(ax, all_ms)
            if p.b_threshold:
                ax.axvline(p.b_threshold, color="#333333", linestyle="--", linewidth=1.1, zorder=1)
                ax.annotate(f"B_th = {p.b_threshold}", xy=(p.b_threshold, 0.5), xycoords=("data", "axes fraction"),
                            xytext=(5, 0), textcoords="offset points", ha="left", va="center", fontsize=9,
                            fontweight="bold", color="#333333",
                            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1.5})
            sub = f"{p.kernel} [{p.backend}]" if p.kernel else ""
            ax.set_title(f"{p.key}: {sub}" if sub else p.key, fontsize=10)
            ax.set_xlabel("batch size (requests)")
            ax.set_ylabel("attention time per step (ms)")
        handles = [Line2D([], [], color=colour[d], marker="o", markersize=4, label=d) for d in dists]
        handles.append(Line2D([], [], color="#555555", marker="X", linestyle="", markersize=6, label="split-KV off"))
        if any(p.b_threshold for p in panels):
            handles.append(Line2D([], [], color="#333333", linestyle="--", label="B_th (split-KV stops)"))
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles))
    return fig


# --- Gantt --------------------------------------------------------------------------------------------------

def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _rects(items: list[tuple[int, float, float]], height: float) -> list[list[tuple[float, float]]]:
    """Polygons (in ms) of bars (row, start_ns, end_ns), centred on row + 0.5."""
    polys = []
    for row, a, b in items:
        y0, y1 = row + 0.5 - height / 2, row + 0.5 + height / 2
        x0, x1 = _ms(a), _ms(b)
        polys.append([(x0, y0), (x1, y0), (x1, y1), (x0, y1)])
    return polys


def busy_curve(sched: Gantt) -> tuple[list[float], list[int]]:
    """Number of busy SMs over time (a step function: times in ns, counts), from the union of each SM's work."""
    per_sm: dict[int, list[tuple[float, float]]] = {}
    for seg in sched.segments:
        per_sm.setdefault(seg.sm, []).append((seg.start_ns, seg.end_ns))
    deltas: dict[float, int] = {}
    for ivs in per_sm.values():
        for a, b in _union(ivs):
            deltas[a] = deltas.get(a, 0) + 1
            deltas[b] = deltas.get(b, 0) - 1
    xs, ys, n = [0.0], [0], 0
    for t in sorted(deltas):
        n += deltas[t]
        xs.append(t)
        ys.append(n)
    return xs, ys


def gantt_figure(sched: Gantt) -> Figure:
    """Top: how many SMs are busy over time. Bottom: one row per SM, its busy time in blue, the work items that
    form the tail in red, idle time blank; the dashed line marks where the tail starts."""
    from matplotlib.collections import PolyCollection

    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(10.5, min(6.2, max(3.6, 0.03 * sched.num_sms + 2.2))), layout="constrained")
        top, ax = fig.subplots(2, 1, sharex=True, height_ratios=(1, 4))
        per_sm: dict[int, list[tuple[float, float]]] = {}
        tail: list[tuple[int, float, float]] = []
        for seg in sched.segments:
            per_sm.setdefault(seg.sm, []).append((seg.start_ns, seg.end_ns))
            if seg.tail:
                tail.append((seg.sm, seg.start_ns, seg.end_ns))
        busy = [(sm, a, b) for sm, ivs in per_sm.items() for a, b in _union(ivs)]
        ax.add_collection(PolyCollection(_rects(busy, 0.8), facecolors=BUSY, alpha=0.8, linewidths=0))
        ax.add_collection(PolyCollection(_rects(tail, 0.95), facecolors=TAIL, linewidths=0))
        end = max([seg.end_ns for seg in sched.segments] + [sched.predicted_ns or 0, sched.measured_ns or 0, 1.0])
        xs, ys = busy_curve(sched)
        top.step([_ms(x) for x in xs], ys, where="post", color=BUSY, linewidth=1.3)
        top.fill_between([_ms(x) for x in xs], ys, step="post", color=BUSY, alpha=0.25, linewidth=0)
        top.axhline(sched.num_sms / 2, color="#999999", linewidth=0.8, linestyle=":")
        top.set_ylim(0, sched.num_sms * 1.05)
        top.set_ylabel("SMs busy")
        top.set_title(sched.title, fontsize=10)
        for a in (top, ax):
            if sched.tail_start_ns is not None:
                a.axvline(_ms(sched.tail_start_ns), color=TAIL, linestyle="--", linewidth=1)
            if sched.measured_ns:
                a.axvline(_ms(sched.measured_ns), color="#333333", linestyle=":", linewidth=1)
        if sched.tail_start_ns is not None and tail:
            tail_sms = {sm for sm, _, _ in tail}
            idle_sms = sched.num_sms - len(tail_sms)
            mid = (_ms(sched.tail_start_ns) + _ms(max(b for _, _, b in tail))) / 2
            ax.text(mid, sched.num_sms * 0.3, f"tail: {len(tail_sms)} SMs busy, {idle_sms} idle for "
                    f"{_ms(max(b for _, _, b in tail) - sched.tail_start_ns):.3g} ms", ha="center", va="center",
                    fontsize=10, color=TAIL, fontweight="bold",
                    bbox={"facecolor": "white", "edgecolor": TAIL, "boxstyle": "round,pad=0.4", "alpha": 0.9})
        ax.set_ylim(sched.num_sms, 0)
        ax.set_xlim(0, _ms(end) * 1.02)
        ax.set_ylabel(f"SM (0–{sched.num_sms - 1})")
        ax.set_xlabel("time since launch start (ms)")
        ax.grid(axis="y", visible=False)
        handles: list[Artist] = [Patch(color=BUSY, alpha=0.8, label="SM busy"),
                                 Patch(color=TAIL, label="tail work items")]
        if sched.tail_start_ns is not None:
            handles.append(Line2D([], [], color=TAIL, linestyle="--", label="tail starts"))
        if sched.measured_ns:
            handles.append(Line2D([], [], color="#333333", linestyle=":", label="measured end"))
        ax.legend(handles=handles, loc="lower right", ncols=len(handles), framealpha=0.92, frameon=True)
    return fig


# --- serialisation --------------------------------------------------------------------------------------------

_SVG_HEAD = re.compile(r"^.*?(?=<svg\b)", re.S)
_SVG_META = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_SVG_NS = re.compile(r'\s+xmlns(?::xlink)?="[^"]*"')


def to_svg(fig: Figure, inline: bool = True) -> str:
    """SVG text. `inline`: stripped of the XML prolog, DOCTYPE, metadata and namespace URLs (HTML5 knows SVG), so
    that the page holds no URL at all."""
    with matplotlib.rc_context(_STYLE):
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buf.getvalue()
    if inline:
        text = _SVG_META.sub("", _SVG_HEAD.sub("", text, count=1))
        text = _SVG_NS.sub("", text)
    return text


def to_png(fig: Figure, dpi: int = 130) -> bytes:
    with matplotlib.rc_context(_STYLE):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()
