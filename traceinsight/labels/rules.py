"""The labeling rules as typed data: loading and validating rules.toml (and user rule files).

A user file has the same format as the built-in `rules.toml` (see docs/LABELS.md). Its rules, context
rules, namespaces and dtypes are tried before the built-in ones; its extractors are added to (and, by
id, replace) the built-in ones. Any problem raises FormatError with a one-line message naming the file.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traceinsight.errors import FormatError, InputError
from traceinsight.labels.result import FAMILIES, PHASES

BUILTIN = Path(__file__).with_name("rules.toml")
KINDS = ("int", "bool", "type", "dtype", "any")
FROM_NAMESPACE = "from-namespace"
FROM_PARAMS = "from-params"
DEFAULT_EVIDENCE = "the kernel name does not tell the phase"

Value = int | bool | str


@dataclass(frozen=True)
class TemplateSpec:
    """Read the arguments of the first template named `name` (compiled to match a whole identifier
    followed by '<'): `args` = ((param, kind), ...)."""

    name: re.Pattern[str]
    args: tuple[tuple[str, str], ...]
    unpack: tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class Extractor:
    """How to read parameters from a kernel name."""

    id: str
    templates: tuple[TemplateSpec, ...]
    search: tuple[tuple[str, re.Pattern[str]], ...]
    derive: tuple[tuple[str, tuple[str | int, ...]], ...]
    dtype: bool


@dataclass(frozen=True)
class PhaseCase:
    """For phase = 'from-params': `phase` when every (param, value) of `when` holds."""

    when: tuple[tuple[str, Value], ...]
    phase: str
    evidence: str


@dataclass(frozen=True)
class Rule:
    id: str
    pattern: re.Pattern[str]
    not_pattern: re.Pattern[str] | None
    family: str
    backend: str | None
    kernel: str
    phase: str
    phase_evidence: str
    extract: Extractor | None
    phase_when: tuple[PhaseCase, ...]
    source: str


@dataclass(frozen=True)
class ContextRule:
    id: str
    range_word: re.Pattern[str] | None
    unless_word: re.Pattern[str] | None
    q_rows_per_request: int | None
    phase: str
    evidence: str


@dataclass(frozen=True)
class Namespace:
    pattern: re.Pattern[str]
    hint: re.Pattern[str] | None
    backend: str


@dataclass(frozen=True)
class RuleData:
    """Everything one rules file holds, validated."""

    rules: tuple[Rule, ...]
    contexts: tuple[ContextRule, ...]
    namespaces: tuple[Namespace, ...]
    dtypes: tuple[tuple[str, re.Pattern[str]], ...]
    extractors: Mapping[str, Extractor]


def word_pattern(word: str) -> re.Pattern[str]:
    """`word` case-insensitively, not glued to other letters (a following capital starts a new word)."""
    return re.compile(r"(?<![A-Za-z])(?i:" + re.escape(word) + r")(?![a-z])")


class _Checker:
    """Validation helpers that turn every problem into a one-line FormatError naming the file."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, where: str, what: str) -> FormatError:
        return FormatError(f"{self.path}: {where}: {what}")

    def table(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, "expected a table")
        return value

    def keys(self, d: Mapping[str, Any], where: str, required: set[str], optional: set[str]) -> None:
        missing = required - d.keys()
        if missing:
            raise self.fail(where, f"missing key {sorted(missing)[0]!r}")
        extra = d.keys() - required - optional
        if extra:
            raise self.fail(where, f"unknown key {sorted(extra)[0]!r}")

    def string(self, d: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
        v = d.get(key, default)
        if not isinstance(v, str):
            raise self.fail(where, f"{key} must be a string")
        return v

    def regex(self, text: Any, where: str) -> re.Pattern[str]:
        if not isinstance(text, str) or not text:
            raise self.fail(where, "a pattern must be a non-empty string")
        try:
            return re.compile(text)
        except re.error as e:
            raise self.fail(where, f"bad regex {text!r}: {e}") from None

    def phase(self, v: Any, where: str, allow_from_params: bool = False) -> str:
        ok = PHASES + ((FROM_PARAMS,) if allow_from_params else ())
        if v not in ok:
            raise self.fail(where, f"phase must be one of {', '.join(ok)}, not {v!r}")
        return str(v)


def _factors(expr: str) -> tuple[str | int, ...]:
    out: list[str | int] = []
    for part in expr.split("*"):
        p = part.strip()
        if not p:
            raise ValueError(expr)
        out.append(int(p) if p.isdigit() else p)
    return tuple(out)


def _extractor(c: _Checker, eid: str, d: Any) -> Extractor:
    where = f"extractor {eid!r}"
    d = c.table(d, where)
    c.keys(d, where, set(), {"template", "search", "derive", "dtype"})
    templates: list[TemplateSpec] = []
    for i, t in enumerate(d.get("template", [])):
        tw = f"{where} template {i + 1}"
        t = c.table(t, tw)
        c.keys(t, tw, {"name", "args"}, {"unpack"})
        args: list[tuple[str, str]] = []
        if not isinstance(t["args"], list):
            raise c.fail(tw, "args must be a list")
        for a in t["args"]:
            if not isinstance(a, str) or ":" not in a:
                raise c.fail(tw, f"arg {a!r} must read 'name:kind'")
            pname, kind = a.split(":", 1)
            if kind not in KINDS:
                raise c.fail(tw, f"arg {a!r}: kind must be one of {', '.join(KINDS)}")
            args.append((pname, kind))
        unpack: list[tuple[str, tuple[str, ...]]] = []
        for arg, names in c.table(t.get("unpack", {}), tw).items():
            if arg not in dict(args) or not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise c.fail(tw, f"unpack {arg!r} must name a type argument and list parameter names")
            unpack.append((arg, tuple(names)))
        c.regex(t["name"], tw)
        name = re.compile(r"(?<![A-Za-z0-9_])(?:" + t["name"] + r")(?=\s*<)")
        templates.append(TemplateSpec(name, tuple(args), tuple(unpack)))
    search = tuple(
        (k, c.regex(v, f"{where} search {k!r}")) for k, v in c.table(d.get("search", {}), where).items()
    )
    derive: list[tuple[str, tuple[str | int, ...]]] = []
    for k, v in c.table(d.get("derive", {}), where).items():
        try:
            derive.append((k, _factors(v)))
        except (ValueError, AttributeError):
            raise c.fail(where, f"derive {k!r} must be a product such as 'vec_size * bdx'") from None
    dtype = d.get("dtype", False)
    if not isinstance(dtype, bool):
        raise c.fail(where, "dtype must be true or false")
    return Extractor(eid, tuple(templates), search, tuple(derive), dtype)


_RULE_REQUIRED = {"id", "pattern", "family"}
_RULE_OPTIONAL = {"not_pattern", "backend", "kernel", "phase", "phase_evidence", "extract", "phase_when"}


def _rule(c: _Checker, i: int, d: Any, extractors: Mapping[str, Extractor]) -> Rule:
    where = f"rule {i + 1}"
    d = c.table(d, where)
    if isinstance(d.get("id"), str):
        where = f"rule {i + 1} ({d['id']})"
    c.keys(d, where, _RULE_REQUIRED, _RULE_OPTIONAL)
    family = d["family"]
    if family not in FAMILIES:
        raise c.fail(where, f"family must be one of {', '.join(FAMILIES)}, not {family!r}")
    backend = d.get("backend")
    if backend is not None and (not isinstance(backend, str) or not backend):
        raise c.fail(where, "backend must be a non-empty string")
    phase = c.phase(d.get("phase", "unknown"), where, allow_from_params=True)
    ex = None
    if "extract" in d:
        ex = extractors.get(d["extract"])
        if ex is None:
            raise c.fail(where, f"no extractor named {d['extract']!r}")
    cases: list[PhaseCase] = []
    for j, w in enumerate(d.get("phase_when", [])):
        ww = f"{where} phase_when {j + 1}"
        w = c.table(w, ww)
        c.keys(w, ww, {"when", "phase", "evidence"}, set())
        when = c.table(w["when"], ww)
        if not all(isinstance(v, int | str) for v in when.values()):
            raise c.fail(ww, "when values must be integers, booleans or strings")
        cases.append(PhaseCase(tuple(when.items()), c.phase(w["phase"], ww), c.string(w, "evidence", ww)))
    if cases and phase != FROM_PARAMS:
        raise c.fail(where, "phase_when needs phase = 'from-params'")
    return Rule(
        id=c.string(d, "id", where),
        pattern=c.regex(d["pattern"], where),
        not_pattern=c.regex(d["not_pattern"], where) if "not_pattern" in d else None,
        family=family,
        backend=backend,
        kernel=c.string(d, "kernel", where, "{base}"),
        phase=phase,
        phase_evidence=c.string(d, "phase_evidence", where, DEFAULT_EVIDENCE),
        extract=ex,
        phase_when=tuple(cases),
        source=str(c.path),
    )


def _context(c: _Checker, i: int, d: Any) -> ContextRule:
    where = f"context {i + 1}"
    d = c.table(d, where)
    c.keys(d, where, {"id", "phase", "evidence"}, {"range_word", "unless_word", "q_rows_per_request"})
    if ("range_word" in d) == ("q_rows_per_request" in d):
        raise c.fail(where, "give exactly one of range_word and q_rows_per_request")
    q = d.get("q_rows_per_request")
    if q is not None and (not isinstance(q, int) or isinstance(q, bool)):
        raise c.fail(where, "q_rows_per_request must be an integer")
    return ContextRule(
        id=c.string(d, "id", where),
        range_word=word_pattern(c.string(d, "range_word", where)) if "range_word" in d else None,
        unless_word=word_pattern(c.string(d, "unless_word", where)) if "unless_word" in d else None,
        q_rows_per_request=q,
        phase=c.phase(d["phase"], where),
        evidence=c.string(d, "evidence", where),
    )


def parse_rules(path: Path, text: str, builtin_extractors: Mapping[str, Extractor] | None = None) -> RuleData:
    """Validate one rules file. Extractor ids may refer to `builtin_extractors` as well as the file's own."""
    c = _Checker(path)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise FormatError(f"{path}: not valid TOML: {e}") from None
    c.keys(doc, "top level", set(), {"version", "rule", "extractors", "namespace", "dtypes", "context"})
    if doc.get("version", 1) != 1:
        raise c.fail("top level", f"version {doc['version']!r} is not supported (expected 1)")
    extractors = dict(builtin_extractors or {})
    for eid, ed in c.table(doc.get("extractors", {}), "extractors").items():
        extractors[eid] = _extractor(c, eid, ed)
    rules = tuple(_rule(c, i, d, extractors) for i, d in enumerate(_array(c, doc, "rule")))
    ids = [r.id for r in rules]
    dup = {x for x in ids if ids.count(x) > 1}
    if dup:
        raise c.fail("rules", f"duplicate rule id {sorted(dup)[0]!r}")
    contexts = tuple(_context(c, i, d) for i, d in enumerate(_array(c, doc, "context")))
    namespaces: list[Namespace] = []
    for i, d in enumerate(_array(c, doc, "namespace")):
        where = f"namespace {i + 1}"
        d = c.table(d, where)
        c.keys(d, where, {"pattern", "backend"}, {"hint"})
        hint = c.regex(d["hint"], where) if "hint" in d else None
        namespaces.append(Namespace(c.regex(d["pattern"], where), hint, c.string(d, "backend", where)))
    dtypes = tuple((k, c.regex(v, f"dtype {k!r}")) for k, v in c.table(doc.get("dtypes", {}), "dtypes").items())
    return RuleData(rules, contexts, tuple(namespaces), dtypes, extractors)


def _array(c: _Checker, doc: Mapping[str, Any], key: str) -> list[Any]:
    v = doc.get(key, [])
    if not isinstance(v, list):
        raise c.fail(key, f"use [[{key}]] tables")
    return v


def read_rules_file(path: Path, builtin_extractors: Mapping[str, Extractor] | None = None) -> RuleData:
    """Read and validate a rules file; a missing/unreadable file is an InputError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: rules file not found") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a rules file") from None
    except UnicodeDecodeError:
        raise FormatError(f"{path}: rules file is not UTF-8 text") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read rules file: {e.strerror}") from None
    return parse_rules(path, text, builtin_extractors)
