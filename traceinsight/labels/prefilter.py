"""Speed: a literal pre-check for each rule regex, so most rules are rejected without a regex search.

`required_literals(p)` returns literals of which every match of `p` must contain at least one (each
flagged case-insensitive or not), or None when it cannot tell. It reads the regex through Python's own
parser (`re._parser`); if that is unavailable or the pattern is unusual, it returns None and the rule
is simply always searched. `Prefilter.candidates` applies the pre-checks of all rules to a name with
its digits blanked (so names that differ only in numbers, the usual case, share one cached result).
A pre-check can only skip a search that would have failed: labels are the same with or without it
(tests/test_labels.py checks this on every real trace name).
"""

from __future__ import annotations

import re
from typing import Any

try:  # Python >= 3.11 names it re._parser; keep working (without the speed-up) if that changes.
    from re import _constants as _c  # type: ignore[attr-defined]
    from re import _parser as _p  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    _p = None
    _c = None

Literal = tuple[str, bool]  # (text, case-insensitive)


def _seq(items: Any, ci: bool) -> list[Literal] | None:
    """Best requirement of a sequence: the longest literal run, or an alternation's literal set."""
    best: list[Literal] | None = None
    best_score = 0
    run: list[str] = []

    def consider(req: list[Literal] | None) -> None:
        nonlocal best, best_score
        if req:
            score = min(len(t) for t, _ in req)
            if score > best_score:
                best, best_score = req, score

    def flush() -> None:
        if run:
            consider([("".join(run), ci)])
            run.clear()

    for op, av in items:
        if op is _c.LITERAL:
            run.append(chr(av))
            continue
        flush()
        if op is _c.SUBPATTERN:
            _group, add, delete, sub = av
            consider(_seq(sub, (ci or bool(add & re.IGNORECASE)) and not delete & re.IGNORECASE))
        elif op is _c.BRANCH:
            alts = [_seq(a, ci) for a in av[1]]
            if all(alts):
                consider([lit for a in alts if a for lit in a])
        elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT) and av[0] >= 1:
            consider(_seq(av[2], ci))
    flush()
    return best


def required_literals(pattern: re.Pattern[str]) -> tuple[Literal, ...] | None:
    """Literals one of which every match of `pattern` contains; None when unknown."""
    if _p is None or _c is None:
        return None
    try:
        parsed = _p.parse(pattern.pattern, pattern.flags)
        ci = bool(parsed.state.flags & re.IGNORECASE)
        req = _seq(parsed, ci)
    except Exception:  # any parser surprise: no pre-check, never a wrong one
        return None
    if not req:
        return None
    return tuple((t.lower(), True) if c else (t, False) for t, c in req)


_BLANK_DIGITS = str.maketrans("123456789", "000000000")


class Prefilter:
    """Which rules (by index) may match a name: those whose required literals occur in it.

    Digits are blanked in both the literals and the name, which keeps the test conservative
    (a literal in a text stays in it after both are blanked) and lets numeric variants share a result.
    """

    def __init__(self, patterns: list[re.Pattern[str]], enabled: bool = True):
        self._all = tuple(range(len(patterns)))
        self._checks: list[tuple[int, tuple[str, ...], tuple[str, ...]]] = []
        for i, p in enumerate(patterns):
            req = required_literals(p) if enabled else None
            if req is None:
                self._checks.append((i, (), ()))  # always a candidate
                continue
            cs = tuple(t.translate(_BLANK_DIGITS) for t, ci in req if not ci)
            ci_ = tuple(t.translate(_BLANK_DIGITS) for t, ci in req if ci)
            self._checks.append((i, cs, ci_))
        self.enabled = enabled
        self._cache: dict[str, tuple[int, ...]] = {}

    def candidates(self, *texts: str) -> tuple[int, ...]:
        """Indices of the rules that may match one of `texts`, in rule order."""
        if not self.enabled or not all(t.isascii() for t in texts):
            return self._all  # IGNORECASE folds a few non-ASCII letters: no shortcut there
        key = "\x00".join(texts).translate(_BLANK_DIGITS)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        low = key.lower()
        out: list[int] = []
        for i, cs, ci in self._checks:
            if not cs and not ci:
                out.append(i)
                continue
            for lit in cs:
                if lit in key:
                    out.append(i)
                    break
            else:
                for lit in ci:
                    if lit in low:
                        out.append(i)
                        break
        res = tuple(out)
        if len(self._cache) < 200_000:
            self._cache[key] = res
        return res
