"""The labeler: an ordered, first-match-wins walk over the rules."""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import MappingProxyType

from traceinsight.labels.demangle import demangle
from traceinsight.labels.extract import extract, fill, phase_from_params
from traceinsight.labels.prefilter import Prefilter
from traceinsight.labels.result import Label
from traceinsight.labels.rules import (
    FROM_NAMESPACE,
    FROM_PARAMS,
    ContextRule,
    Namespace,
    Rule,
    RuleData,
)
from traceinsight.labels.templates import base_name, qualified_name

_SOURCE = re.compile(r"(\d+)")
_EMPTY: MappingProxyType[str, int | str | bool] = MappingProxyType({})


def mangled_base(name: str) -> str:
    """The last plain identifier at the start of a mangled name we could not demangle."""
    i = 2
    while i < len(name) and name[i] in "NLKVr":
        i += 1
    last = name
    while i < len(name) and name[i].isdigit():
        m = _SOURCE.match(name, i)
        if not m:
            break
        n = int(m.group(1))
        ident = name[m.end(): m.end() + n]
        if len(ident) != n:
            break
        if not ident.startswith("_GLOBAL__N"):
            last = ident
        i = m.end() + n
    return last


class RuleSet:
    """Rules, context rules, namespaces and dtypes, in the order they are tried; labels names."""

    def __init__(self, parts: Sequence[RuleData], prefilter: bool = True):
        self.rules: tuple[Rule, ...] = tuple(r for p in parts for r in p.rules)
        # Literal pre-checks (prefilter.py): skip regex searches that cannot succeed.
        self._prefilter = Prefilter([r.pattern for r in self.rules], enabled=prefilter)
        self.contexts: tuple[ContextRule, ...] = tuple(c for p in parts for c in p.contexts)
        self.namespaces: tuple[Namespace, ...] = tuple(n for p in parts for n in p.namespaces)
        self.dtypes = tuple(d for p in parts for d in p.dtypes)
        self._cache: dict[str, Label] = {}

    def rule_ids(self) -> list[str]:
        return [r.id for r in self.rules]

    def backend_of(self, text: str, qn: str | None = None) -> str | None:
        """The owning library of a name, from the [[namespace]] table (`qn`: its qualified name)."""
        qn = qualified_name(text) if qn is None else qn
        for ns in self.namespaces:
            if ns.pattern.search(qn):
                return ns.backend
        for ns in self.namespaces:
            if ns.hint is not None and ns.hint.search(text):
                return ns.backend
        return None

    def label(self, name: str) -> Label:
        """The label of one kernel name (demangled, nsys-style, ncu-style or mangled). Never raises."""
        hit = self._cache.get(name)
        if hit is None:
            hit = self._label(name)
            if len(self._cache) < 1_000_000:
                self._cache[name] = hit
        return hit

    def _label(self, name: str) -> Label:
        raw = name if isinstance(name, str) else str(name)
        text = raw.strip()
        demangled = demangle(text) if text.startswith("_Z") else None
        if demangled is not None:
            text = demangled
        texts = (text, raw) if demangled is not None else (text,)
        for i in self._prefilter.candidates(*texts):
            rule = self.rules[i]
            if not (rule.pattern.search(text) or (demangled is not None and rule.pattern.search(raw))):
                continue
            if rule.not_pattern is not None and rule.not_pattern.search(text):
                continue
            return self._apply(rule, text, raw, demangled)
        base = mangled_base(raw) if raw.startswith("_Z") and demangled is None else base_name(text)
        return Label("other", None, base, "unknown", "no rule matched the name", "fallback", _EMPTY)

    def _apply(self, rule: Rule, text: str, raw: str, demangled: str | None) -> Label:
        params = extract(rule.extract, text, self.dtypes) if rule.extract is not None else {}
        if rule.phase == FROM_PARAMS:
            phase, evidence = phase_from_params(rule.phase_when, params, rule.phase_evidence)
        else:
            phase, evidence = rule.phase, fill(rule.phase_evidence, params)
        if raw.startswith("_Z") and demangled is None:
            qn = base = mangled_base(raw)
        else:
            qn = qualified_name(text)
            base = base_name(text, qn=qn)
        backend = self.backend_of(text, qn) if rule.backend == FROM_NAMESPACE else rule.backend
        kernel = fill(rule.kernel, {**params, "base": base, "name": text})
        return Label(
            family=rule.family,
            backend=backend,
            kernel=kernel,
            phase=phase,
            phase_evidence=evidence,
            rule=rule.id,
            params=MappingProxyType(params) if params else _EMPTY,
        )
