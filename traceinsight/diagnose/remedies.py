"""Remedies per cause and per backend, as data (`remedies.toml`): the first entry for a cause whose conditions
hold for the trace. A remedy never recommends the backend or mechanism the trace already uses: the conditions
say which trace each text is for (FlashAttention-3 traces do not get "use FlashAttention-3", CUDA-graph traces
do not get "capture CUDA graphs", traces already chunking their prefill do not get "enable chunked prefill")."""

from __future__ import annotations

import itertools
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from operator import attrgetter
from typing import Any

from traceinsight.diagnose.context import TraceAnalysis
from traceinsight.model.phases import MIXED

_LAUNCHES = attrgetter("launches")
_KIND = attrgetter("attention.backend", "phase")

CONDITIONS = ("backend", "not_backend", "cuda_graph", "chunked", "step_phase")


@dataclass(frozen=True)
class Facts:
    """What the trace already uses: its decode attention backends, CUDA-graph replay, chunked prefill."""

    backends: frozenset[str]
    cuda_graph: bool
    chunked: bool


@dataclass(frozen=True)
class Remedy:
    cause: str
    when: dict[str, Any]
    text: str

    def applies(self, facts: Facts, backends: frozenset[str], step_phase: str | None = None) -> bool:
        w = self.when
        if "step_phase" in w and w["step_phase"] != step_phase:
            return False
        if "backend" in w and not backends & set(w["backend"]):
            return False
        if "not_backend" in w and backends & set(w["not_backend"]):
            return False
        if "cuda_graph" in w and bool(w["cuda_graph"]) != facts.cuda_graph:
            return False
        return not ("chunked" in w and bool(w["chunked"]) != facts.chunked)


@cache
def table() -> tuple[Remedy, ...]:
    """The remedies of `remedies.toml`, in file order (checked: known conditions, non-empty texts)."""
    raw = tomllib.loads(resources.files(__package__).joinpath("remedies.toml").read_text())
    out = []
    for i, r in enumerate(raw["remedy"]):
        when = dict(r.get("when", {}))
        unknown = set(when) - set(CONDITIONS)
        if unknown or not r.get("text") or not r.get("cause"):
            raise ValueError(f"remedies.toml entry {i}: unknown conditions {sorted(unknown)} or no cause/text")
        out.append(Remedy(r["cause"], when, " ".join(r["text"].split())))
    return tuple(out)


def causes() -> frozenset[str]:
    return frozenset(r.cause for r in table())


def facts(ctx: TraceAnalysis) -> Facts:
    """What the trace uses, from its steps and schedule (cached on the analysis)."""
    got = ctx.cache.get("remedy-facts")
    if isinstance(got, Facts):
        return got
    # Each distinct (backend, phase) of the launches, in one pass in C (a long trace has 10^6 launches).
    kinds = set(map(_KIND, itertools.chain.from_iterable(map(_LAUNCHES, ctx.steps))))
    backends = frozenset(b for b, phase in kinds if b and phase != "prefill")
    sched = ctx.schedule
    graph = bool(sched and sched.cuda_graph_kernels) or any(
        b.cuda_graph for b in (sched.batches.values() if sched else ()) if b.cuda_graph)
    chunked = any(phase == MIXED for _, phase in kinds)
    out = Facts(backends, graph, chunked)
    ctx.cache["remedy-facts"] = out
    return out


def remedy(cause: str, f: Facts, backends: Iterable[str] | None = None, step_phase: str | None = None,
           **values: Any) -> str:
    """The remedy text for `cause` on a trace with facts `f`; `backends`: the backends the finding is about
    (default: all of the trace's); `step_phase`: the phase of the steps it is about. Placeholders not given
    read generically ({b_th} -> 'B_th')."""
    which = frozenset(backends) if backends is not None else f.backends
    keys = [cause] + (["kernels:*"] if cause.startswith("kernels:") else [])
    for key in keys:
        for r in table():
            if r.cause == key and r.applies(f, which, step_phase):
                return r.text.format_map(_Defaults(values, cause))
    return ""


class _Defaults(dict[str, Any]):
    def __init__(self, values: dict[str, Any], cause: str) -> None:
        super().__init__({k: v for k, v in values.items() if v is not None})
        self.cause = cause

    def __missing__(self, key: str) -> str:
        if key == "family":
            return self.cause.removeprefix("kernels:").capitalize()
        if key == "ops":
            return "the trace names no host operation that grew"
        return {"b_th": "B_th", "cap": "B_th - 1", "splits": "more"}.get(key, key)
