"""One spelling of a kernel's name whichever tool wrote it, and its kind (the spelling without numbers).

Kineto writes `16u`, `false`, `{lambda()#1}` where Nsight Systems writes `(unsigned int)16`, `(bool)0`,
`[lambda() (instance 1)]`; parameter lists are abbreviated differently by each. `kernel_spelling` applies
`REWRITES`, an ordered table of (pattern, replacement), then drops every (...) group and all spaces; numbers are
kept. `kernel_kind` takes every number out of the spelling (`nvjet_sm90_tst_320x64_64x4_2x1_v_bz_TNT` ->
`nvjet_sm#_tst_#x#_#x#_#x#_v_bz_TNT`), so that a kernel whose tile or size arguments changed still matches itself.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Ordered: each rewrite sees the text the ones above it left.
REWRITES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\(anonymous namespace\)|<unnamed>"), "{anon}"),
    # `{lambda()#1}` (Kineto) and `[lambda() (instance 1)]` (Nsight Systems)
    (re.compile(r"\{lambda\([^(){}]*\)#\d+\}|\[lambda\([^()\[\]]*\) \(instance \d+\)\]"), "{lambda}"),
    (re.compile(r"\bvoid\s+"), ""),
    # The cast in front of a literal: `(unsigned int)16`, `(flashinfer::MaskMode)0`, `(bool)1`.
    (re.compile(r"\([\w: ]+\)\s*(?=-?\d|true\b|false\b)"), ""),
    (re.compile(r"\bfalse\b"), "0"),
    (re.compile(r"\btrue\b"), "1"),
    # Literal suffixes: `16u`, `8ul`.
    (re.compile(r"(\d)[uUlL]+\b"), r"\1"),
)
NUMBER = re.compile(r"\d+")
_SPACES = re.compile(r"\s+")


@lru_cache(maxsize=65536)
def kernel_spelling(name: str) -> str:
    """The kernel's name as one spelling whichever tool wrote it: parameter lists dropped, anonymous namespaces,
    lambdas, casts, literal suffixes and booleans written one way, no spaces; numbers kept."""
    t = name.strip()
    for pattern, replacement in REWRITES:
        t = pattern.sub(replacement, t)
    return _SPACES.sub("", _drop_parens(t))


@lru_cache(maxsize=65536)
def kernel_kind(name: str) -> str:
    """The kernel's spelling (`kernel_spelling`) with every number taken out: what pairs a kernel whose sizes
    changed with itself."""
    return spelling_kind(kernel_spelling(name))


def spelling_kind(spelling: str) -> str:
    """A spelling already made (`kernel_spelling`) with every number taken out."""
    return NUMBER.sub("#", spelling)


def _drop_parens(text: str) -> str:
    """`text` without its (...) groups: the parameter lists inside template arguments, which the tools abbreviate
    differently (`const T1 &` vs the type spelled out)."""
    out: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)
