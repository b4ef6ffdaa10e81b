"""Applying an extractor: template arguments -> parameters; and the phase of 'from-params' rules."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from traceinsight.labels.rules import Extractor, PhaseCase, TemplateSpec, Value
from traceinsight.labels.templates import parse_const, parse_value, split_args, template_args

DtypeTable = Sequence[tuple[str, re.Pattern[str]]]


def normalize_dtype(spelling: str, dtypes: DtypeTable) -> str:
    """'cutlass::bfloat16_t' -> 'bf16'; an unknown type keeps its spelling."""
    for canon, pat in dtypes:
        if pat.search(spelling):
            return canon
    return spelling


def name_dtype(text: str, dtypes: DtypeTable) -> str | None:
    """The leftmost 16/8-bit floating-point type named anywhere in `text` (fp32 is an accumulator)."""
    best: tuple[int, str] | None = None
    for canon, pat in dtypes:
        if canon == "fp32":
            continue
        m = pat.search(text)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), canon)
    return best[1] if best else None


def _convert(token: str, kind: str, dtypes: DtypeTable) -> Value | None:
    """The value of one template argument if it has `kind`, else None (the layout does not fit)."""
    v = parse_value(token)
    if kind == "any":
        return v
    if kind == "int":
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    if kind == "bool":
        if isinstance(v, bool):
            return v
        return bool(v) if isinstance(v, int) and v in (0, 1) else None
    if not isinstance(v, str):  # type / dtype
        return None
    return normalize_dtype(v, dtypes) if kind == "dtype" else v


def _read_template(spec: TemplateSpec, text: str, dtypes: DtypeTable) -> dict[str, Value] | None:
    args = template_args(text, spec.name)
    if args is None or len(args) < len(spec.args):
        return None
    raw: dict[str, str] = {}
    out: dict[str, Value] = {}
    for (pname, kind), tok in zip(spec.args, args, strict=False):
        v = _convert(tok, kind, dtypes)
        if v is None:
            return None
        if pname != "_":
            raw[pname] = tok
            out[pname] = v
    for arg, names in spec.unpack:
        tok = raw.get(arg, "")
        k = tok.find("<")
        inner = split_args(tok, k) if k >= 0 else None
        out.pop(arg, None)
        if inner is None:
            continue
        for pname, itok in zip(names, inner, strict=False):
            out[pname] = parse_const(itok)
    return out


def extract(ex: Extractor, text: str, dtypes: DtypeTable) -> dict[str, Value]:
    """Parameters of `text` (a demangled kernel name) according to `ex`. Earlier sources win."""
    params: dict[str, Value] = {}
    for spec in ex.templates:
        got = _read_template(spec, text, dtypes)
        if got:
            for k, v in got.items():
                params.setdefault(k, v)
    for key, pat in ex.search:
        m = pat.search(text)
        if pat.groups:
            if m and m.group(1) is not None:
                params.setdefault(key, parse_value(m.group(1)))
        elif m is not None or "<" in text:  # absent means False only where template arguments show
            params.setdefault(key, m is not None)
    if ex.dtype and "dtype" not in params:
        d = name_dtype(text, dtypes)
        if d:
            params["dtype"] = d
    for key, factors in ex.derive:
        if key in params:
            continue
        prod = 1
        for f in factors:
            factor = f if isinstance(f, int) else params.get(f)
            if not isinstance(factor, int) or isinstance(factor, bool):
                break
            prod *= factor
        else:
            params[key] = prod
    return params


def _same(a: Value | None, b: Value) -> bool:
    return a is not None and type(a) is type(b) and a == b


def phase_from_params(
    cases: Sequence[PhaseCase], params: Mapping[str, Value], default_evidence: str
) -> tuple[str, str]:
    """The first case whose `when` holds (every parameter present and equal), else ('unknown', default)."""
    for case in cases:
        if all(_same(params.get(k), v) for k, v in case.when):
            return case.phase, fill(case.evidence, params)
    return "unknown", default_evidence


_FIELD = re.compile(r"\{(\w+)\}")


def fill(template: str, values: Mapping[str, object]) -> str:
    """Replace {key} by values[key]; unknown keys stay as written."""
    return _FIELD.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), template)
