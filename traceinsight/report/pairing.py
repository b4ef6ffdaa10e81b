"""What pairs a step or a kernel of one run with those of another run: their kind, not their index.

A step's kind is its name with the numbers taken out (`ProfilerStep#12` -> `ProfilerStep#`), its phase, its batch
size bucket (powers of two: 1, 2-3, 4-7, ..., 256-511) and the attention backend that held most of its attention
time. Kernels pair first by their spelling: the name as one spelling whatever tool wrote it (Kineto's `16u`, `false`,
`{lambda()#1}` and Nsight Systems' `(unsigned int)16`, `(bool)0`, `[lambda() (instance 1)]` alike, parameter lists
dropped). Those left without a partner pair by their kind: the spelling with every number taken out
(`nvjet_sm90_tst_320x64_64x4_2x1_v_bz_TNT` -> `nvjet_sm#_tst_#x#_#x#_#x#_v_bz_TNT`), so that a kernel whose tile or
size arguments changed with the shape still pairs with itself.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

_DIGITS = re.compile(r"\d+")
_ANON = re.compile(r"\(anonymous namespace\)|<unnamed>")
# `{lambda()#1}` (Kineto) and `[lambda() (instance 1)]` (Nsight Systems)
_LAMBDA = re.compile(r"\{lambda\([^(){}]*\)#\d+\}|\[lambda\([^()\[\]]*\) \(instance \d+\)\]")
_VOID = re.compile(r"\bvoid\s+")
# The cast in front of a literal: `(unsigned int)16`, `(flashinfer::MaskMode)0`, `(bool)1`.
_CAST = re.compile(r"\([\w: ]+\)\s*(?=-?\d|true\b|false\b)")
_TRUE = re.compile(r"\btrue\b")
_FALSE = re.compile(r"\bfalse\b")
_SUFFIX = re.compile(r"(\d)[uUlL]+\b")
NUMBER = re.compile(r"\d+")
_SPACES = re.compile(r"\s+")


def step_name_kind(name: str) -> str:
    """The step's name without its numbers (`ProfilerStep#12` -> `ProfilerStep#`)."""
    return _DIGITS.sub("", name).strip()


def batch_bucket(batch: dict[str, Any] | None) -> str | None:
    """The power-of-two bucket of the step's batch size ('32-63'), from the exact size or the middle of its
    bounds; None when unknown."""
    if not batch:
        return None
    b = batch.get("batch_size")
    if b is None and batch.get("batch_size_min") is not None and batch.get("batch_size_max") is not None:
        b = (batch["batch_size_min"] + batch["batch_size_max"]) // 2
    if b is None or b < 1:
        return None
    lo = 1 << (int(b).bit_length() - 1)
    return str(lo) if lo == 1 else f"{lo}-{2 * lo - 1}"


def step_backend(step: dict[str, Any]) -> str | None:
    """The attention backend that held most of the step's attention launch time (None without launches)."""
    per: dict[str | None, int] = {}
    for x in step.get("launches") or []:
        per[x.get("backend")] = per.get(x.get("backend"), 0) + (x.get("dur_ns") or 0)
    return max(per, key=lambda k: per[k]) if per else None


def step_kind(step: dict[str, Any]) -> tuple[str, str, str | None, str | None]:
    """(name kind, phase, batch bucket, backend): what pairs this step with the other run's."""
    return (step_name_kind(step.get("name") or ""), step.get("phase") or "unknown", batch_bucket(step.get("batch")),
            step_backend(step))


@lru_cache(maxsize=65536)
def kernel_spelling(name: str) -> str:
    """The kernel's name as one spelling whichever tool wrote it: parameter lists dropped, anonymous namespaces,
    lambdas, casts, literal suffixes and booleans written one way, no spaces; numbers kept."""
    t = _ANON.sub("{anon}", name.strip())
    t = _LAMBDA.sub("{lambda}", t)
    t = _VOID.sub("", t)
    t = _CAST.sub("", t)
    t = _TRUE.sub("1", _FALSE.sub("0", t))
    t = _SUFFIX.sub(r"\1", t)
    return _SPACES.sub("", _drop_parens(t))


@lru_cache(maxsize=65536)
def kernel_kind(name: str) -> str:
    """The kernel's spelling (`kernel_spelling`) with every number taken out: what pairs a kernel whose sizes
    changed with itself."""
    return NUMBER.sub("#", kernel_spelling(name))


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
