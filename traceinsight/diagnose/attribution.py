"""Differential attribution: which parts of a step grew, compared with the steps around it.

Each step has a breakdown (`traceinsight.model.breakdown`): its wall time split into attention, prefill, the
other kernel families and GPU idle (waiting for the host, waiting on a synchronisation). Steps form series (the
steps of one decode loop: the same decode attention kernels; a prefill-only step stays in the series of the
decode steps around it, since it stalls them). In a series:
- the step's baseline wall time comes from `baseline.fit_spikes` (linear in the step's KV tokens when a sidecar
  gives them, else the rolling lower quartile of the steps around it), and the step is a spike when it takes
  `ratio` times that and `min_excess_ns` more;
- every component has its own baseline: the rolling median of that component over the non-spike steps within
  `half_window` steps (attention scaled by the step's KV tokens when they are known: the median attention time
  per token of those steps times the step's tokens);
- the step's excess (wall minus baseline) is split over the components that grew, in proportion to how much
  each grew; the largest is the step's cause component.
Pure computation over the analysis; `table()` caches its result on the analysis (`release` lets it go).
"""

from __future__ import annotations

import itertools
import operator
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from traceinsight.components import IDLE, IDLE_HOST, IDLE_UNKNOWN, IDLE_WAIT, PREFILL
from traceinsight.diagnose.baseline import fit_spikes, rolling_quantiles, rolling_spikes
from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.model.step_arrays import StepArrays
from traceinsight.model.steps import ATTENTION

# The quantile of a component over its baseline steps (the median: components go up and down).
COMPONENT_QUANTILE = 0.5
# Pseudo-component: idle-host time in long stretches (a stall rather than launch overhead); compared like the
# others but not part of the split.
HOST_LONG = "host-long"
# Cause ids of the components that are not attention (attention's cause is the attention rule that explains
# the step, see latency-spike).
COMPONENT_CAUSES = {
    PREFILL: "prefill",
    IDLE_WAIT: "gpu-wait",
    IDLE_UNKNOWN: "gpu-idle",
}
HOST_STALL = "host-stall"
HOST_LAUNCH_BOUND = "host-launch-bound"
# idle-host growth counts as a stall when at least this share of it came in long stretches.
STALL_SHARE = 0.5
# The cached product the rules that judge steps against their series declare they read (`rule.USES`): the
# attribution `table`.
ATTRIBUTION = "attribution"
_KEY = "attribution"


@dataclass(frozen=True)
class Part:
    """One component of a step against its baseline (ns): step_ns, baseline_ns, delta_ns (may be negative),
    attributed_ns (its share of the step's excess; 0 when it did not grow) and share (of the growth)."""

    component: str
    step_ns: int
    baseline_ns: float
    delta_ns: float
    attributed_ns: float
    share: float

    def to_json(self) -> dict[str, Any]:
        return {"component": self.component, "step_ns": self.step_ns, "baseline_ns": round(self.baseline_ns),
                "delta_ns": round(self.delta_ns), "attributed_ns": round(self.attributed_ns),
                "share": round(self.share, 4)}


@dataclass(frozen=True)
class _Series:
    """One series' components as arrays (rows: its steps in order; columns: `names`), with their baselines."""

    names: list[str]
    values: np.ndarray
    bases: np.ndarray
    excess: np.ndarray  # wall - baseline wall, per step


@dataclass(frozen=True, slots=True)  # slots: one per step (10^6 in a long trace)
class StepAttribution:
    """A step judged against its series (times in ns): wall and baseline wall, ratio, whether it is a spike, how
    the baseline was made, its series and position in it, and its components against theirs (`parts`, largest
    attributed first; computed when asked: a long trace has 10^5 steps and only its spikes are read)."""

    step: int
    series: int
    position: int  # index of the step in its series
    wall_ns: int
    baseline_ns: float
    spike: bool
    method: str
    host_long_delta_ns: float
    data: _Series = field(repr=False, compare=False)
    row: int = field(repr=False, compare=False)
    ran_prefill: bool = False  # the step holds a prefill or mixed launch
    _parts: tuple[Part, ...] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def ratio(self) -> float:
        return self.wall_ns / self.baseline_ns if self.baseline_ns else 0.0

    @property
    def excess_ns(self) -> float:
        return self.wall_ns - self.baseline_ns

    @property
    def parts(self) -> tuple[Part, ...]:
        """The components, largest attributed first (computed once, when first asked)."""
        if self._parts is None:
            object.__setattr__(self, "_parts", self._compute_parts())
        assert self._parts is not None
        return self._parts

    def _compute_parts(self) -> tuple[Part, ...]:
        d, i = self.data, self.row
        deltas = d.values[i] - d.bases[i]
        grown = np.where(deltas > 0, deltas, 0.0)
        total = float(grown.sum())
        excess = max(self.excess_ns, 0.0)
        items = []
        for j, c in enumerate(d.names):
            share = float(grown[j]) / total if total > 0 else 0.0
            items.append(Part(c, int(d.values[i, j]), float(d.bases[i, j]), float(deltas[j]), excess * share, share))
        items.sort(key=lambda p: (-p.attributed_ns, -p.delta_ns, p.component))
        return tuple(items)

    def _groups(self) -> dict[str, tuple[float, float]]:
        """(time, baseline) per cause group: each component alone, except that in a step that ran more prefill
        than its baseline steps, its GPU work and the host time the GPU waited for are one group, `prefill`: the
        GEMMs, norms and attention of the prompt's tokens, and the host's preparation of them (planning the
        prefill launch), are the prefill's cost. Waits on synchronisation stay apart."""
        d, i = self.data, self.row
        out = {c: (float(d.values[i, j]), float(d.bases[i, j])) for j, c in enumerate(d.names)}
        p = out.get(PREFILL)
        if self.ran_prefill and p is not None and p[0] > p[1]:
            cost = [v for c, v in out.items() if c not in IDLE or c == IDLE_HOST]
            out = {c: v for c, v in out.items() if c in IDLE and c != IDLE_HOST}
            out[PREFILL] = (sum(v for v, _ in cost), sum(b for _, b in cost))
        return out

    @property
    def component(self) -> str | None:
        """What grew the most: a component, or `prefill` for all the GPU work of a step that ran more prefill
        than its baseline steps (None when nothing grew)."""
        groups = self._groups()
        if not groups:
            return None
        name, (v, b) = max(groups.items(), key=lambda kv: kv[1][0] - kv[1][1])
        return name if v - b > 0 else None

    def part(self, component: str) -> Part | None:
        return next((p for p in self.parts if p.component == component), None)

    def jumped(self, component: str, ratio: float, min_excess_ns: float) -> bool:
        """Whether `component` alone broke from its baseline the way a spike does (ratio times it and
        min_excess_ns above it). For `prefill`, the prefill launches themselves (not the group of `component`:
        a step that ran a prefill chunk jumped there, whatever its total)."""
        d, i = self.data, self.row
        got = ((float(d.values[i, d.names.index(component)]), float(d.bases[i, d.names.index(component)]))
               if component in d.names else None)
        if got is None:
            return False
        v, b = got
        return v - b >= min_excess_ns and v >= ratio * b

    def delta(self, component: str) -> float | None:
        """`component`'s time against its baseline (ns; its part's delta_ns, without building every part), None
        when the step's series has no such component."""
        d = self.data
        if component not in d.names:
            return None
        j = d.names.index(component)
        return float(d.values[self.row, j] - d.bases[self.row, j])

    def host_cause(self, component: str | None = None) -> str:
        """host-stall when the host's idle growth came mostly in long stretches, else host-launch-bound."""
        grew = self.delta(component or IDLE_HOST) or 0.0
        return HOST_STALL if grew > 0 and self.host_long_delta_ns >= STALL_SHARE * grew else HOST_LAUNCH_BOUND

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "wall_ns": self.wall_ns, "baseline_ns": round(self.baseline_ns),
                "excess_ns": round(self.excess_ns), "ratio": round(self.ratio, 3), "spike": self.spike,
                "baseline": self.method, "component": self.component,
                "attribution": [p.to_json() for p in self.parts]}


def component_cause(component: str, att: StepAttribution) -> str:
    """Cause id of a grown non-attention component: 'prefill', 'host-stall' / 'host-launch-bound', 'gpu-wait',
    'gpu-idle', or 'kernels:<family>'."""
    if component == IDLE_HOST:
        return att.host_cause(component)
    return COMPONENT_CAUSES.get(component, f"kernels:{component}")


def series(arrays: StepArrays) -> list[np.ndarray]:
    """The step series of a trace, each as the positions in its steps (`arrays`: `model.step_arrays`) of its steps
    in time order: steps with the same decode attention kernels (sorted distinct names); a step with no decode
    launch (prefill only) joins the series of the step before it (or after it, at the start). Series in the order
    they first appear; those without a launch are left out. Arrays, not a list of steps per series: a long trace
    has 10^5-10^6 steps."""
    n = arrays.n
    if not n:
        return []
    order = np.lexsort((arrays.index, arrays.start))
    key = arrays.signature[order]
    if (key < 0).all():
        key = np.zeros(n, np.int64)  # no decode launch at all: one series (of the empty signature)
    else:
        # A step without a decode launch takes the key of the last one before it (the first key at the start).
        at = np.maximum.accumulate(np.where(key >= 0, np.arange(n), -1))
        key = np.where(at >= 0, key[np.maximum(at, 0)], key[int(np.argmax(key >= 0))])
    launched = arrays.launch_count[order] > 0
    distinct, first = np.unique(key, return_index=True)
    out = []
    for k in distinct[np.argsort(first, kind="stable")].tolist():
        members = key == k
        if launched[members].any():
            out.append(order[members])
    return out


def _component_baselines(values: np.ndarray, use: np.ndarray, half: int, tokens: Sequence[int] | None,
                         per_token: bool) -> np.ndarray:
    """A component's baseline per step (float64): its rolling quantile over the used steps (per KV token when
    `per_token` and the steps' tokens are known, scaled back), over arrays (no Python float per step)."""
    if per_token and tokens is not None:
        t = np.asarray(tokens, float)
        rate = np.divide(values, t, out=np.zeros_like(values, dtype=float), where=t > 0)
        scaled: np.ndarray = rolling_quantiles(rate, half, use, COMPONENT_QUANTILE) * t
        return scaled
    return rolling_quantiles(values.astype(float), half, use, COMPONENT_QUANTILE)


@dataclass(frozen=True)
class SeriesPart:
    """One part of a series as arrays in series order (its steps whose KV tokens are known, or those without: each
    part has its own fit); row i of every array, and of `data`, is one step. Its rows' StepAttributions are made
    when asked for (`at`): a long trace has 10^5-10^6 steps, and the rules read these arrays."""

    series: int
    method: str
    data: _Series
    steps: np.ndarray  # step indexes (int64)
    positions: np.ndarray  # each step's index in its series (int64)
    wall: np.ndarray  # wall time (int64 ns)
    baseline: np.ndarray  # baseline wall time (float ns)
    spike: np.ndarray  # bool
    long_delta: np.ndarray  # idle-host time in long stretches against its baseline (float ns)
    prefill: np.ndarray  # the step holds a prefill or mixed launch (bool)

    def at(self, row: int) -> StepAttribution:
        return StepAttribution(step=int(self.steps[row]), series=self.series, position=int(self.positions[row]),
                               wall_ns=int(self.wall[row]), baseline_ns=float(self.baseline[row]),
                               spike=bool(self.spike[row]), method=self.method,
                               host_long_delta_ns=float(self.long_delta[row]), data=self.data, row=row,
                               ran_prefill=bool(self.prefill[row]))

    def components(self, rows: np.ndarray | None = None) -> list[str | None]:
        """Each row's `StepAttribution.component` (what grew the most) of `rows` (all when None), computed for
        them at once."""
        d = self.data
        values, bases, prefill = ((d.values, d.bases, self.prefill) if rows is None
                                  else (d.values[rows], d.bases[rows], self.prefill[rows]))
        n = len(values)
        names = d.names
        if not names:
            return [None] * n
        delta = values - bases
        labels: list[str | None] = [*names, PREFILL, None]  # code -1: None
        codes = np.argmax(delta, axis=1)
        codes = np.where(delta[np.arange(n), codes] > 0, codes, -1)
        if PREFILL in names:
            jp = names.index(PREFILL)
            case = prefill & (values[:, jp] > bases[:, jp])
            if case.any():  # the step's GPU work and the host time it waited for are one group, `prefill`
                apart = [j for j, c in enumerate(names) if c in IDLE and c != IDLE_HOST]
                v = np.zeros(int(case.sum()))
                b = np.zeros(len(v))
                for j in range(len(names)):  # summed in the order StepAttribution._groups sums
                    if j not in apart:
                        v = v + values[case, j]
                        b = b + bases[case, j]
                groups = np.column_stack([delta[case][:, apart], v - b])
                best = np.argmax(groups, axis=1)
                col = np.array([*apart, len(names)], np.int64)[best]
                codes[case] = np.where(groups[np.arange(len(v)), best] > 0, col, -1)
        out: list[str | None] = np.array(labels, dtype=object)[codes].tolist()
        return out

    def jumped(self, row: int, component: str, ratio: float, min_excess_ns: float) -> bool:
        """`StepAttribution.jumped` of one row."""
        d = self.data
        if component not in d.names:
            return False
        j = d.names.index(component)
        v, b = float(d.values[row, j]), float(d.bases[row, j])
        return v - b >= min_excess_ns and v >= ratio * b


class Table(Mapping[int, StepAttribution]):
    """Every step's attribution by step index, held as arrays per series part (`parts`, in series order, each
    series' parts in turn); a StepAttribution is made when a step is asked for."""

    def __init__(self, parts: list[SeriesPart]) -> None:
        self.parts = parts
        steps = np.concatenate([p.steps for p in parts]) if parts else np.zeros(0, np.int64)
        self._n = len(steps)
        self._lo = int(steps.min()) if len(steps) else 0
        size = int(steps.max()) - self._lo + 1 if len(steps) else 0
        self._part = np.full(size, -1, np.int64)
        self._row = np.zeros(size, np.int64)
        for k, p in enumerate(parts):
            self._part[p.steps - self._lo] = k
            self._row[p.steps - self._lo] = np.arange(len(p.steps))
        self._calm: dict[int, tuple[np.ndarray, np.ndarray]] | None = None

    def locate(self, step: object) -> tuple[int, int] | None:
        """(part number, row) of a step, None when the table has no such step."""
        if not isinstance(step, int | np.integer):
            return None
        k = int(step) - self._lo
        if not 0 <= k < len(self._part) or self._part[k] < 0:
            return None
        return int(self._part[k]), int(self._row[k])

    def span(self) -> tuple[int, int]:
        """The least step index and how many indexes from it the table spans (some may be missing)."""
        return self._lo, len(self._part)

    def __getitem__(self, step: int) -> StepAttribution:
        got = self.locate(step)
        if got is None:
            raise KeyError(step)
        return self.parts[got[0]].at(got[1])

    def __contains__(self, step: object) -> bool:
        return self.locate(step) is not None

    def __iter__(self) -> Iterator[int]:
        for p in self.parts:
            yield from p.steps.tolist()

    def __len__(self) -> int:
        return self._n

    def gather(self, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The wall times (int64) and baselines (float) of `steps` (all in the table)."""
        k = steps - self._lo
        parts, rows = self._part[k], self._row[k]
        wall = np.zeros(len(steps), np.int64)
        base = np.zeros(len(steps))
        for i, p in enumerate(self.parts):
            mine = parts == i
            if mine.any():
                wall[mine] = p.wall[rows[mine]]
                base[mine] = p.baseline[rows[mine]]
        return wall, base

    def calm_series(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per series, the positions and steps of its non-spike steps in position order, as int64 arrays (built once
        per table, from its arrays)."""
        if self._calm is None:
            by: dict[int, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
            for p in self.parts:
                calm = ~p.spike
                by[p.series].append((p.positions[calm], p.steps[calm]))
            out = {}
            for key, chunks in by.items():
                pos = np.concatenate([c[0] for c in chunks])
                st = np.concatenate([c[1] for c in chunks])
                order = np.lexsort((st, pos))
                out[key] = (pos[order], st[order])
            self._calm = out
        return self._calm

    def series_rows(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per series: the part number and row of each of its steps, in series order."""
        by: dict[int, list[int]] = defaultdict(list)
        for k, p in enumerate(self.parts):
            by[p.series].append(k)
        out = {}
        for gi, ks in by.items():
            part = np.concatenate([np.full(len(self.parts[k].steps), k, np.int64) for k in ks])
            row = np.concatenate([np.arange(len(self.parts[k].steps)) for k in ks])
            order = np.argsort(np.concatenate([self.parts[k].positions for k in ks]), kind="stable")
            out[gi] = (part[order], row[order])
        return out


def _attribute(arrays: StepArrays, members: np.ndarray, gi: int, tokens_of: Mapping[int, int],
               known_slow: set[int], *, ratio: float, min_excess_ns: float, half: int, min_fit: int
               ) -> list[SeriesPart]:
    """The parts of one series (`members`: its steps' positions in `arrays`, in series order)."""
    n = len(members)
    indexes = arrays.index[members]
    step_tokens = [tokens_of.get(i) for i in indexes.tolist()] if tokens_of else [None] * n
    known = (np.fromiter(map(operator.is_not, step_tokens, itertools.repeat(None)), bool, n) if tokens_of
             else np.zeros(n, bool))
    positions = np.arange(n)
    split: list[tuple[np.ndarray, list[int] | None]] = []
    if known.any():
        split.append((positions[known], [t or 0 for t in step_tokens if t is not None]))
    if not known.all():
        split.append((positions[~known], None))
    out = []
    for rows, tokens in split:
        at = members[rows]
        index = indexes[rows]
        wall = arrays.wall[at]
        slow = (np.isin(index, np.fromiter(known_slow, np.int64, len(known_slow))) if known_slow
                else np.zeros(len(at), bool))
        if tokens is None:  # over arrays: no Python number per step
            method = "rolling-quantile"
            baseline, spike = rolling_spikes(wall.astype(float), slow, ratio=ratio, min_excess_ns=min_excess_ns,
                                             half_window=half, min_fit_points=min_fit)
        else:
            fit = fit_spikes(wall.tolist(), tokens, ratio=ratio, min_excess_ns=min_excess_ns, half_window=half,
                             exclude=slow.tolist(), min_fit_points=min_fit)
            method, baseline, spike = fit.method, np.asarray(fit.baseline_ns, float), np.asarray(fit.spikes, bool)
        use = ~(spike | slow)
        if int(use.sum()) < min_fit:
            use = ~spike
        values, names = arrays.component_matrix(at)
        bases = np.zeros_like(values)
        for j, c in enumerate(names):
            bases[:, j] = _component_baselines(values[:, j], use, half, tokens, c == ATTENTION)
        longs = arrays.host_long[at].astype(float)
        long_base = rolling_quantiles(longs, half, use, COMPONENT_QUANTILE)
        data = _Series(names, values, bases, wall.astype(float) - baseline)
        out.append(SeriesPart(
            series=gi, method=method, data=data, steps=index, positions=rows.astype(np.int64), wall=wall,
            baseline=baseline, spike=spike, long_delta=longs - long_base, prefill=arrays.prefill[at]))
    return out


def table(ctx: TraceAnalysis, *, ratio: float, min_excess_ns: float, half_window: int, min_fit: int,
          known_slow: set[int]) -> Table:
    """Every step's attribution (by step index), computed once per analysis and set of parameters (until
    `release`)."""
    key = ("attribution", ratio, min_excess_ns, half_window, min_fit, frozenset(known_slow))
    got = ctx.cache.get(_KEY)
    if isinstance(got, tuple) and got[0] == key:
        return got[1]  # type: ignore[no-any-return]
    s = ctx.schedule
    tokens_of = ({i: t for i, b in s.batches.items() if b.source == "sidecar" and (t := b.total_kv_tokens) is not None}
                 if s else {})
    parts: list[SeriesPart] = []
    arrays = ctx.step_arrays()
    for gi, members in enumerate(series(arrays)):
        parts.extend(_attribute(arrays, members, gi, tokens_of, known_slow, ratio=ratio,
                                min_excess_ns=min_excess_ns, half=half_window, min_fit=min_fit))
    out = Table(parts)
    ctx.cache[_KEY] = (key, out)
    return out


def release(ctx: TraceAnalysis) -> None:
    """Let go of the attribution table (`ATTRIBUTION`: its component matrices and baselines, per step); asked
    again, it is made again."""
    ctx.cache.pop(_KEY, None)
