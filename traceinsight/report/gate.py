"""The regression gate of `traceinsight diff`: steps and kernels of BEFORE and AFTER paired by kind
(report/pairing.py), the change of each group's median and p90 with a bootstrap interval (report/compare_stats.py),
a verdict only where the interval clears the threshold, the cause where the analysis has one, priced in ns per step.

Groups:
- step groups: steps of one kind (name without numbers, phase, batch bucket, attention backend); the sample is each
  step's wall time. A kind found on one side only pairs with the other side's kind that differs only in its
  backend (a path change: tensor-core <-> CUDA-core), else it is listed as new / gone.
- kernel groups: attention launches of one kernel kind, phase and backend (from the steps' launches), and the
  executions of each merge / prepare / GEMM / MoE / communication kernel kind (from the trace's kernels, when the
  input is a trace); the sample is each execution's time.

A side given as an analysis JSON has no kernel samples beyond its steps' attention launches, and a JSON holding only
the steps that matter has no step samples: the gate then says what it could not compare (`notes`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from traceinsight.labels.spelling import kernel_spelling, spelling_kind
from traceinsight.report.compare_stats import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    MIN_SAMPLES,
    QuantileChange,
    noise_floor,
    quantile_change,
    verdict,
)
from traceinsight.report.pairing import step_kind

DEFAULT_THRESHOLD = 0.05
METRICS = {"median": 0.5, "p90": 0.9}
# Kernel families compared from the trace's kernels (attention comes from the steps' launches).
SAMPLED_FAMILIES = ("merge", "prepare", "gemm", "moe", "communication")
GROUP_VERDICTS = ("regressed", "improved", "unchanged")
# A step component named as what grew only when it grew by at least this share of the step group's change.
COMPONENT_CAUSE_SHARE = 0.5
# Split-KV counts as newly off when the share of launches without it grew by at least this much.
SPLIT_OFF_SHARE_RISE = 0.2
# Unchanged groups whose median moved by at least this much (and whose interval excludes 0) get a summary line
# saying the change is there but below the gate; at most BELOW_LINES of them.
BELOW_SHOWN = 0.01
BELOW_LINES = 5
METHOD = (f"percentile bootstrap ({BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}) of the relative change "
          f"of each quantile, {CONFIDENCE:.0%} interval; quantile = order statistic of rank ceil(q*n); fewer than "
          f"{MIN_SAMPLES} values on a side: no interval, no verdict")

# A second kernel group of one short name shows this many characters of its name from where it differs.
LABEL_ARGS = 60
KernelKey = tuple[str, str, str | None, str | None]  # (family, kernel spelling, phase, backend)


@dataclass(frozen=True)
class Calibration:
    """Run-to-run noise measured on A/A diffs (two captures of one workload, `diff --format json`): per group label
    and metric the largest |change| seen (a step group per step time: `LABEL [gpu]`, `LABEL [wall]`), and per
    family (`steps-gpu`, `steps-wall` for step groups) the largest of its groups, for groups the A/A diffs did not
    have."""

    sources: tuple[str, ...]
    groups: Mapping[str, Mapping[str, float]]
    families: Mapping[str, Mapping[str, float]]

    def floor(self, group: str, family: str, metric: str) -> float:
        got = self.groups.get(group)
        if got is not None and metric in got:
            return got[metric]
        return self.families.get(family, {}).get(metric, max((f.get(metric, 0.0) for f in self.families.values()),
                                                              default=0.0))


def calibration(diffs: Sequence[tuple[str, Mapping[str, Any]]]) -> Calibration:
    """The run-to-run noise of A/A diff documents (name, traceinsight.diff/1 with its `gate`): a FormatError
    naming the file when one is not a diff with a gate."""
    from traceinsight.errors import FormatError

    groups: dict[str, dict[str, float]] = defaultdict(dict)
    families: dict[str, dict[str, float]] = defaultdict(dict)
    for name, d in diffs:
        g = d.get("gate") if isinstance(d, Mapping) else None
        if not isinstance(g, Mapping) or d.get("schema") != "traceinsight.diff/1":
            raise FormatError(f"{name}: not a diff with a regression gate (write one with traceinsight diff A1 A2 "
                              "--format json)")
        measured: list[tuple[str, str, Mapping[str, Any]]] = [
            (row["group"], row.get("family") or "", row.get("metrics") or {}) for row in g.get("kernel_groups") or []]
        for row in g.get("step_groups") or []:  # a step group per step time it was measured on
            for which, key in (("step_metric", "metrics"), ("other_metric", "other_metrics")):
                if row.get(which):
                    measured.append((f"{row['group']} [{row[which]}]", f"steps-{row[which]}", row.get(key) or {}))
        for group, fam, metrics in measured:
            for m, v in metrics.items():
                if v.get("change") is None or v.get("ci_low") is None:
                    continue
                x = abs(float(v["change"]))
                groups[group][m] = max(groups[group].get(m, 0.0), x)
                families[fam][m] = max(families[fam].get(m, 0.0), x)
    return Calibration(tuple(n for n, _ in diffs), dict(groups), dict(families))


# What a step group's sample is: each step's GPU busy time (`breakdown.gpu_busy_ns`: the union of its kernels, the
# GPU span without a breakdown) or its wall time (`wall_ns`: what the engine waited for, host time included).
STEP_METRICS = ("gpu", "wall")


def step_time(step: Mapping[str, Any], metric: str) -> int:
    """The step's time (ns) as `metric` ('gpu' or 'wall') counts it."""
    if metric == "wall":
        return int(step.get("wall_ns") or step["dur_ns"])
    b = step.get("breakdown") or {}
    return int(b.get("gpu_busy_ns") or step["dur_ns"])


@dataclass(frozen=True)
class Thresholds:
    """The relative change a metric's interval must clear to count as a regression / improvement (0.05 = 5 %),
    widened per group by the run-to-run noise of A/A diffs when `calibration` is given: threshold + that group's
    largest A/A change (its family's largest for a group the A/A diffs did not have)."""

    median: float = DEFAULT_THRESHOLD
    p90: float = DEFAULT_THRESHOLD
    calibration: Calibration | None = None
    step_metric: str = "gpu"  # STEP_METRICS: what step groups are gated on

    def of(self, metric: str) -> float:
        return float(getattr(self, metric))

    def for_group(self, metric: str, group: str, family: str) -> tuple[float, float | None]:
        """(threshold for this group and metric, its run-to-run floor or None without calibration)."""
        if self.calibration is None:
            return self.of(metric), None
        floor = self.calibration.floor(group, family, metric)
        return self.of(metric) + floor, floor


@dataclass
class KernelSamples:
    """Execution times (ns) per kernel kind of one side, and that side's step count (to price per step)."""

    durations: dict[KernelKey, list[int]] = field(default_factory=dict)
    names: dict[KernelKey, str] = field(default_factory=dict)  # a display name per key (the short kernel name)
    from_trace: bool = False

    def add(self, key: KernelKey, durs: Iterable[int], name: str) -> None:
        self.durations.setdefault(key, []).extend(int(d) for d in durs)
        self.names.setdefault(key, name)


def kernel_samples(rows: Iterable[Mapping[str, Any]]) -> KernelSamples:
    """The samples of queries/kernel_durations.sql rows (name, family, backend, durs_ns)."""
    from traceinsight.labels.templates import base_name

    out = KernelSamples(from_trace=True)
    for r in rows:
        out.add((r["family"], kernel_spelling(r["name"]), None, r.get("backend")), r["durs_ns"] or [],
                base_name(r["name"]))
    return out


def attention_samples(doc: Mapping[str, Any], into: KernelSamples | None = None) -> KernelSamples:
    """Attention launch times per (kernel kind, phase, backend) from the document's steps."""
    out = into if into is not None else KernelSamples()
    for s in doc.get("steps") or []:
        for x in s.get("launches") or []:
            key = ("attention", kernel_spelling(x.get("name") or x.get("kernel") or ""), x.get("phase"),
                   x.get("backend"))
            out.add(key, [x.get("dur_ns") or 0], x.get("kernel") or "")
    return out


# --- groups ---------------------------------------------------------------------------------------------------

def _metrics(before: Sequence[int], after: Sequence[int], th: Thresholds, group: str,
             family: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m, q in METRICS.items():
        c = quantile_change(before, after, q)
        limit, floor = th.for_group(m, group, family)
        out[m] = {**c.to_json(), "verdict": verdict(c, limit), "threshold": _r(limit),
                  "noise_floor": _r(noise_floor(c)), "run_to_run": _r(floor), "detected": _detected(c)}
    return out


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 5)


def _detected(c: QuantileChange) -> bool:
    """The interval excludes no change: a change these samples show, whether or not it clears the threshold."""
    return c.low is not None and c.high is not None and (c.low > 0 or c.high < 0)


def _group_verdict(metrics: Mapping[str, Any]) -> str:
    vs = [m["verdict"] for m in metrics.values()]
    if "regressed" in vs:
        return "regressed"
    return "improved" if "improved" in vs else "unchanged"


def _kind_json(k: tuple[str, str, str | None, str | None]) -> dict[str, Any]:
    return {"name": k[0], "phase": k[1], "batch_bucket": k[2], "backend": k[3]}


def _label(k: tuple[str, str, str | None, str | None]) -> str:
    b = f" B {k[2]}" if k[2] else ""
    return f"{k[0]} {k[1]}{b}" + (f" [{k[3]}]" if k[3] else "")


PATH_KIND = {"flashinfer-cuda-core": "CUDA-core", "flashinfer-fa2": "tensor-core", "flashinfer-sm90": "tensor-core"}


def _path(backend: str | None) -> str:
    return f"{backend} ({PATH_KIND[backend]})" if backend in PATH_KIND else str(backend)


def _step_groups(doc: Mapping[str, Any]) -> dict[tuple[str, str, str | None, str | None], list[dict[str, Any]]]:
    out: dict[tuple[str, str, str | None, str | None], list[dict[str, Any]]] = defaultdict(list)
    for s in doc.get("steps") or []:
        out[step_kind(s)].append(s)
    return dict(out)


def _components(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


def _split_cause(before: list[dict[str, Any]], after: list[dict[str, Any]], after_doc: Mapping[str, Any],
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


def _spike_cause(before: list[dict[str, Any]], after: list[dict[str, Any]], before_doc: Mapping[str, Any],
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


def _median(vals: Sequence[int]) -> int:
    import statistics

    return int(statistics.median(vals)) if vals else 0


def step_groups(before_doc: Mapping[str, Any], after_doc: Mapping[str, Any], th: Thresholds) -> list[dict[str, Any]]:
    """Each step kind of either side: paired, a path change, new or gone; with metrics and causes when paired."""
    gb, ga = _step_groups(before_doc), _step_groups(after_doc)
    pairs: list[tuple[Any, Any, str]] = [(k, k, "paired") for k in gb if k in ga]
    only_b = [k for k in gb if k not in ga]
    only_a = [k for k in ga if k not in gb]
    for kb in list(only_b):  # the same steps on another attention path
        match = [ka for ka in only_a if ka[:3] == kb[:3]]
        if len(match) == 1 and len([k for k in only_b if k[:3] == kb[:3]]) == 1:
            pairs.append((kb, match[0], "path-change"))
            only_b.remove(kb)
            only_a.remove(match[0])
    rows: list[dict[str, Any]] = []
    for kb, ka, status in pairs:
        sb, sa = gb[kb], ga[ka]
        samples = {m: ([step_time(s, m) for s in sb], [step_time(s, m) for s in sa]) for m in STEP_METRICS}
        wb, wa = samples[th.step_metric]
        metrics = _metrics(wb, wa, th, f"{_label(ka)} [{th.step_metric}]", f"steps-{th.step_metric}")
        other = next(m for m in STEP_METRICS if m != th.step_metric)
        info = _metrics(*samples[other], th, f"{_label(ka)} [{other}]", f"steps-{other}")  # shown, not gated
        comps = [c for c in _components(sb, sa)
                 if th.step_metric == "wall" or not c["component"].startswith("idle")]
        causes: list[dict[str, Any]] = []
        if status == "path-change":
            causes.append({"kind": "path-change", "text": f"attention path {_path(kb[3])} -> {_path(ka[3])}"})
        split = _split_cause(sb, sa, after_doc, ka[3])
        if split:
            causes.append(split)
        spike = _spike_cause(sb, sa, before_doc, after_doc)
        if spike:
            causes.append(spike)
        delta = _median(wa) - _median(wb)
        if comps and delta and comps[0]["delta_ns"] * delta > 0 and abs(comps[0]["delta_ns"]) >= (
                COMPONENT_CAUSE_SHARE * abs(delta)):
            c = comps[0]
            causes.append({"kind": "component", "component": c["component"],
                           "text": f"{c['component']} {'grew' if c['delta_ns'] > 0 else 'shrank'} by "
                                   f"{_ms(abs(c['delta_ns']))[1:]} per step (median)", "per_step_ns": c["delta_ns"]})
        for c in causes:
            c.setdefault("per_step_ns", delta)
        rows.append({"group": _label(ka), "kind": _kind_json(ka), "before_kind": _kind_json(kb), "status": status,
                     "n_before": len(sb), "n_after": len(sa), "step_metric": th.step_metric, "metrics": metrics,
                     "verdict": _group_verdict(metrics), "per_step_ns": delta, "components": comps[:4],
                     "causes": causes, "other_metric": other, "other_metrics": info,
                     "other_verdict": _group_verdict(info)})
    for side, keys, groups in (("gone", only_b, gb), ("new", only_a, ga)):
        for k in keys:
            n = len(groups[k])
            rows.append({"group": _label(k), "kind": _kind_json(k), "before_kind": None, "status": side,
                         "n_before": n if side == "gone" else 0, "n_after": n if side == "new" else 0,
                         "metrics": None, "verdict": None, "per_step_ns": None, "components": [], "causes": []})
    return _ordered(rows)


def _ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    order = {"regressed": 0, "improved": 1, "unchanged": 2, None: 3}
    return sorted(rows, key=lambda r: (order[r["verdict"]], -abs(r["per_step_ns"] or 0), r["group"]))


def _ms(ns: float) -> str:
    from traceinsight.units import fmt_ns

    return ("+" if ns > 0 else "") + fmt_ns(int(ns))


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
            metrics = _metrics(db, da, th, label, key[0])
            per_step = row["per_step_after"] or 1.0
            delta = (_median(da) - _median(db)) * per_step
            row.update({"metrics": metrics, "verdict": _group_verdict(metrics), "per_step_ns": int(delta)})
            if status == "path-change":
                row["causes"].append({"kind": "path-change", "per_step_ns": int(delta),
                                      "text": f"attention path {_path(keys_b[0][3])} -> {_path(keys_a[0][3])}"})
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
    return _ordered(rows)


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

    return _split_cause(steps_of(before_doc), steps_of(after_doc), after_doc, key[3])


# --- the gate -------------------------------------------------------------------------------------------------

def gate(before_doc: Mapping[str, Any], after_doc: Mapping[str, Any], before: KernelSamples | None,
         after: KernelSamples | None, th: Thresholds) -> dict[str, Any]:
    """The `gate` section of the diff: step groups, kernel groups, what regressed / improved, the noise floors,
    and what could not be compared."""
    notes = []
    for side, doc in (("before", before_doc), ("after", after_doc)):
        if doc.get("steps_included") == "selected":
            notes.append(f"{side} is an analysis JSON holding only the steps that matter: steps are not compared "
                         "(analyze --format json --steps all, or diff the trace or an analyze --save folder)")
    steps = [] if notes else step_groups(before_doc, after_doc, th)
    kb, ka = before if before is not None else KernelSamples(), after if after is not None else KernelSamples()
    if not notes:  # a document of the steps that matter holds a biased sample of launches
        attention_samples(before_doc, kb)
        attention_samples(after_doc, ka)
    if not (kb.from_trace and ka.from_trace):
        notes.append("GEMM, MoE, communication, merge and prepare kernels are compared only when both sides are "
                     "traces (an analysis JSON keeps the attention launches of its steps alone)")
        kb.durations = {k: v for k, v in kb.durations.items() if k[0] == "attention"}
        ka.durations = {k: v for k, v in ka.durations.items() if k[0] == "attention"}
    nb, na = len(before_doc.get("steps") or []), len(after_doc.get("steps") or [])
    kernels = kernel_groups(kb, ka, nb, na, before_doc, after_doc, th)
    regressed = [g["group"] for g in steps + kernels if g["verdict"] == "regressed"]
    improved = [g["group"] for g in steps + kernels if g["verdict"] == "improved"]
    floors = [(g["metrics"][m]["noise_floor"], g["group"], m) for g in steps + kernels if g["metrics"]
              for m in METRICS if g["metrics"][m]["noise_floor"] is not None]
    cal = th.calibration
    return {
        "method": METHOD,
        "thresholds": {m: th.of(m) for m in METRICS},
        "step_metric": th.step_metric,
        "calibration": None if cal is None else {
            "sources": list(cal.sources), "groups": len(cal.groups),
            "largest": {m: _largest(cal, m) for m in METRICS}},
        "step_groups": steps,
        "kernel_groups": kernels,
        "regressed": regressed,
        "improved": improved,
        "noise_floor": {"min": min(floors)[0], "max": max(floors)[0], "max_group": max(floors)[1],
                        "max_metric": max(floors)[2]} if floors else None,
        "notes": notes,
    }


def _largest(cal: Calibration, metric: str) -> dict[str, Any] | None:
    vals = [(v[metric], k) for k, v in cal.groups.items() if metric in v]
    if not vals:
        return None
    top = max(vals)
    return {"group": top[1], "change": round(top[0], 5)}


def gate_lines(g: Mapping[str, Any]) -> list[str]:
    """One line per regressed / improved group with its change, interval and cause; else one line saying all
    groups are unchanged and the threshold."""
    lines = []
    for row in g["step_groups"] + g["kernel_groups"]:
        if row["verdict"] not in ("regressed", "improved"):
            continue
        lines.append(f"{row['verdict']}: {row['group']}: {change_text(row)}; {_ms(row['per_step_ns'] or 0)} per "
                     "step" + "".join(f"; {c['text']}" for c in row["causes"]))
    if not lines:
        n = sum(1 for r in g["step_groups"] + g["kernel_groups"] if r["verdict"])
        th = ", ".join(f"{m} {v:.0%}" for m, v in g["thresholds"].items())
        lines.append(f"no group regressed or improved beyond the thresholds ({th}): {n} groups compared")
    for row in g["step_groups"]:
        if row.get("other_verdict") in ("regressed", "improved"):
            om = row["other_metrics"]["median"]
            lines.append(f"not gated: {row['group']}: {row['other_metric']} time {row['other_verdict']}, median "
                         f"{om['change']:+.1%} [{om['ci_low']:+.1%}, {om['ci_high']:+.1%}] (steps are gated on "
                         f"{row['step_metric']} time; --step-metric {row['other_metric']} gates on this)")
    cal = g.get("calibration")
    if cal:
        big = cal["largest"].get("median")
        lines.append(f"thresholds widened per group by the run-to-run change of {len(cal['sources'])} A/A diff(s)"
                     + (f" (largest median change {big['change']:.1%}: {big['group']})" if big else ""))
    below = []
    for row in g["step_groups"] + g["kernel_groups"]:  # changes the samples show that the thresholds absorb
        med = (row.get("metrics") or {}).get("median") or {}
        if row.get("verdict") == "unchanged" and med.get("detected") and abs(med.get("change") or 0) >= BELOW_SHOWN:
            rr = med.get("run_to_run")
            why = (f"below its threshold {med['threshold']:.1%} ({g['thresholds']['median']:.1%} + run-to-run floor "
                   f"{rr:.1%})" if rr is not None else f"below the {med['threshold']:.1%} threshold")
            below.append((abs(med["change"]), f"below the gate: {row['group']}: median {med['change']:+.1%} "
                                              f"[{med['ci_low']:+.1%}, {med['ci_high']:+.1%}], {why}"))
    below.sort(key=lambda x: -x[0])
    lines += [text for _, text in below[:BELOW_LINES]]
    if len(below) > BELOW_LINES:
        lines.append(f"and {len(below) - BELOW_LINES} more groups with a smaller change below the gate")
    return lines


def change_text(row: Mapping[str, Any]) -> str:
    """'median +3.1% [+2.8%, +3.5%], p90 +1.0% [-0.5%, +2.2%]' of a paired group."""
    parts = []
    for m, v in (row.get("metrics") or {}).items():
        if v["change"] is None:
            parts.append(f"{m} -")
        elif v["ci_low"] is None:
            parts.append(f"{m} {v['change']:+.1%} (too few samples)")
        else:
            parts.append(f"{m} {v['change']:+.1%} [{v['ci_low']:+.1%}, {v['ci_high']:+.1%}]")
    return ", ".join(parts)
