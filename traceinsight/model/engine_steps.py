"""Serving engines' step annotations: which range names mark one engine iteration, and what those names say.

vLLM, SGLang, TensorRT-LLM, ATOM and torch.profiler write a range per engine iteration (a `record_function` or NVTX
range), and most of them put the iteration's composition in its name: phase, batch size, query and KV token
counts (`step[DECODE bs=32]`, `execute_32_context_0(...)_generation_32(sq32sk32785...)`). The patterns are data,
model/engine_steps.toml (its header says what the fields mean; docs/ENGINE_TRACES.md where each format comes
from). `match(name)` returns what a range name says, or None when no pattern knows it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from traceinsight.errors import FormatError
from traceinsight.model.toml_tables import versioned_tables

# The named groups a pattern may capture, all integers but `phase` (text, mapped by phase_map).
FIELDS = ("batch_size", "query_tokens", "kv_tokens", "prefill_requests", "decode_requests", "prefill_query_tokens",
          "prefill_kv_tokens", "decode_kv_tokens", "iteration")
PHASES = ("decode", "prefill", "mixed", "idle")
LEVELS = ("iteration", "scope")
_KEYS = {"engine", "what", "pattern", "phase", "phase_map", "level", "source", "examples", "expect"}


@dataclass(frozen=True, slots=True)
class Annotation:
    """One [[annotation]] of engine_steps.toml."""

    engine: str
    what: str
    pattern: re.Pattern[str]
    level: str  # 'iteration' | 'scope'
    phase: str | None  # a fixed phase for every name it matches
    phase_map: dict[str, str] = field(default_factory=dict)  # captured `phase` text -> phase
    source: str = ""
    examples: tuple[str, ...] = ()
    expect: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class StepInfo:
    """What an engine's step annotation says about its iteration (None: the name does not say)."""

    engine: str
    level: str
    name: str
    phase: str | None = None
    batch_size: int | None = None
    query_tokens: int | None = None
    kv_tokens: int | None = None
    prefill_requests: int | None = None
    decode_requests: int | None = None
    prefill_query_tokens: int | None = None
    prefill_kv_tokens: int | None = None
    decode_kv_tokens: int | None = None
    iteration: int | None = None

    def fields(self) -> dict[str, Any]:
        """The values the name gave (phase and counts), without the Nones."""
        out: dict[str, Any] = {"phase": self.phase} if self.phase else {}
        out.update({f: getattr(self, f) for f in FIELDS if getattr(self, f) is not None})
        return out

    def merged(self, other: StepInfo) -> StepInfo:
        """This annotation's values, completed by another one of the same iteration (e.g. SGLang's `step[...]`
        inside vLLM-style `execute_...`): a value this one lacks is taken from `other`."""
        kw = {f: getattr(self, f) if getattr(self, f) is not None else getattr(other, f)
              for f in (*FIELDS, "phase")}
        return StepInfo(engine=self.engine, level=self.level, name=self.name, **kw)


def parse(text: str, where: str = "engine_steps.toml") -> tuple[Annotation, ...]:
    """Validate engine_steps.toml's text; a mistake is a one-line FormatError naming `where` and the entry."""
    out = []
    for i, raw in enumerate(versioned_tables(text, where, "annotation")):
        at = f"{where}: annotation {i + 1}"
        if not isinstance(raw, dict) or set(raw) - _KEYS or not {"engine", "pattern", "level"} <= set(raw):
            raise FormatError(f"{at}: keys must be engine, pattern, level and optionally {sorted(_KEYS)}")
        try:
            pattern = re.compile(raw["pattern"])
        except (re.error, TypeError) as exc:
            raise FormatError(f"{at}: pattern is not a regex: {exc}") from None
        unknown = set(pattern.groupindex) - {*FIELDS, "phase"}
        if unknown:
            raise FormatError(f"{at}: groups {sorted(unknown)} are not among phase, {', '.join(FIELDS)}")
        if raw["level"] not in LEVELS:
            raise FormatError(f"{at}: level must be one of {', '.join(LEVELS)}")
        phase_map = raw.get("phase_map", {})
        fixed = raw.get("phase")
        if not isinstance(phase_map, dict) or any(v not in PHASES for v in phase_map.values()) or (
                fixed is not None and fixed not in PHASES):
            raise FormatError(f"{at}: phase and phase_map values must be among {', '.join(PHASES)}")
        if phase_map and "phase" not in pattern.groupindex:
            raise FormatError(f"{at}: phase_map needs a (?P<phase>...) group in the pattern")
        out.append(Annotation(engine=str(raw["engine"]), what=str(raw.get("what", "")), pattern=pattern,
                              level=raw["level"], phase=fixed, phase_map=dict(phase_map),
                              source=str(raw.get("source", "")), examples=tuple(raw.get("examples", ())),
                              expect=tuple(raw.get("expect", ()))))
    return tuple(out)


@functools.cache
def patterns() -> tuple[Annotation, ...]:
    """The built-in patterns (model/engine_steps.toml), most specific first."""
    text = resources.files("traceinsight.model").joinpath("engine_steps.toml").read_text(encoding="utf-8")
    return parse(text)


def info_from(a: Annotation, name: str, m: re.Match[str]) -> StepInfo:
    """What match `m` of annotation `a` on range `name` says."""
    groups = m.groupdict()
    phase = a.phase
    if groups.get("phase") is not None:
        phase = a.phase_map.get(groups["phase"], phase)
    values = {f: int(groups[f]) for f in FIELDS if groups.get(f) is not None}
    return StepInfo(engine=a.engine, level=a.level, name=name, **_derived(values, phase))


def _derived(v: dict[str, int], phase: str | None) -> dict[str, Any]:
    """The values a name implies without stating them: the batch is its prefill and decode requests, the KV
    tokens theirs added, and the phase follows from which of the two are there (a decode request has one query
    row: its query tokens are its request count)."""
    pre, dec = v.get("prefill_requests"), v.get("decode_requests")
    out: dict[str, Any] = dict(v)
    if "batch_size" not in out and pre is not None and dec is not None:
        out["batch_size"] = pre + dec
    if "kv_tokens" not in out and "prefill_kv_tokens" in v and "decode_kv_tokens" in v:
        out["kv_tokens"] = v["prefill_kv_tokens"] + v["decode_kv_tokens"]
    if phase is None and pre is not None and dec is not None and pre + dec > 0:
        phase = "mixed" if pre and dec else "prefill" if pre else "decode"
    out["phase"] = phase
    return out


@functools.lru_cache(maxsize=65536)
def match(name: str) -> StepInfo | None:
    """What the range name `name` says as an engine annotation (the first pattern that matches), or None."""
    for a in patterns():
        m = a.pattern.search(name)
        if m is not None:
            return info_from(a, name, m)
    return None


def iteration_names(names: list[str]) -> list[str]:
    """Those of `names` that mark one engine iteration each (level 'iteration')."""
    out = []
    for n in names:
        info = match(n)
        if info is not None and info.level == "iteration":
            out.append(n)
    return out
