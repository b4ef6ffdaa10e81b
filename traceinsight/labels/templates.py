"""Reading demangled C++ kernel names: template argument lists, literal values, the kernel's base name.

Three spellings of the same name occur in traces (KERNELS.md §6):
- Kineto / libstdc++: `BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, ..., false>`
- Nsight Systems: `<(flashinfer::PosEncodingMode)0, (unsigned int)2, ..., (bool)0>(T9)`
- Nsight Compute: `<0, 2, 1, ...>` without namespaces.
`parse_value` maps all three to the same Python value.
"""

from __future__ import annotations

import re

Value = int | bool | str

_OPEN = {"<": ">", "(": ")", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}
_INT = re.compile(r"^(-?\d+)(?:[uU]|[uU]?[lL]{1,2}|[lL]{1,2}[uU])?$")
_CAST = re.compile(r"^\(([^()]*)\)\s*(-?\d+|true|false)[uUlL]*$")
# `cute::C<128>`, `cute::Int<128>`, `cute::_128`, `_128`: integral constants in tile shapes.
_CONST = re.compile(r"^(?:[\w:]*::)?(?:C|Int)<\s*(?:\([^()]*\))?\s*(-?\d+)[uUlL]*\s*>$|^(?:[\w:]*::)?_(\d+)$")
_ANON = re.compile(r"\(anonymous namespace\)|<unnamed>")
_IDENT = r"(?:\(anonymous namespace\)|<unnamed>|[A-Za-z_~$][\w$]*)"
_HEAD = re.compile(r"\s*(void\s+)?(" + _IDENT + r"(?:::" + _IDENT + r")*)\s*(?=[<(]|$)")


def split_args(text: str, start: int) -> list[str] | None:
    """Top-level comma-separated arguments of the bracket group opening at `text[start]` ('<').

    Nested <...>, (...), [...], {...} are kept whole. Returns None when the group is not closed.
    """
    depth: list[str] = []
    args: list[str] = []
    j = start + 1
    for k in range(start, len(text)):
        ch = text[k]
        if ch in _OPEN:
            depth.append(_OPEN[ch])
        elif ch in _CLOSE:
            if not depth or depth[-1] != ch:
                # `operator<`-like text or a truncated name: give up rather than guess.
                if ch == ">" and depth and depth[-1] != ">":
                    continue  # '>' inside (...) of an expression such as (a>b)
                return None
            depth.pop()
            if not depth:
                last = text[j:k].strip()
                if last or args:
                    args.append(last)
                return args
        elif ch == "," and len(depth) == 1:
            args.append(text[j:k].strip())
            j = k + 1
    return None


def template_args(text: str, name: re.Pattern[str]) -> list[str] | None:
    """Arguments of the first template whose identifier matches `name`.

    `name` must match a whole identifier and stop before its '<' (rules.py compiles it so:
    `KernelTraits` does not match inside `AttentionKernelTraits`).
    """
    m = name.search(text)
    if m is None:
        return None
    k = text.find("<", m.end())
    return split_args(text, k) if k >= 0 else None


def parse_value(token: str) -> Value:
    """`2u`, `(unsigned int)2`, `2` -> 2; `false`, `(bool)0` -> False; `(flashinfer::MaskMode)1` -> 1.

    Anything else (a type) is returned as the stripped text.
    """
    t = token.strip()
    if t == "true":
        return True
    if t == "false":
        return False
    m = _INT.match(t)
    if m:
        return int(m.group(1))
    m = _CAST.match(t)
    if m:
        cast, v = m.group(1).strip(), m.group(2)
        if v in ("true", "false"):
            return v == "true"
        if cast == "bool":
            return v != "0"
        return int(v)
    return t


def parse_const(token: str) -> Value:
    """Like `parse_value`, but also reads integral-constant types (`cute::C<128>` -> 128)."""
    m = _CONST.match(token.strip())
    if m:
        return int(m.group(1) or m.group(2))
    return parse_value(token)


def _strip_tail_group(text: str) -> str:
    """Remove a trailing balanced (...) or <...> group (and a trailing ` const`).

    Only the group's own bracket kind is counted, so `->` inside a parameter list does not confuse it.
    """
    t = text.rstrip()
    if t.endswith(" const"):
        t = t[:-6].rstrip()
    if not t or t[-1] not in (")", ">"):
        return t
    close = t[-1]
    open_ = _CLOSE[close]
    depth = 0
    for k in range(len(t) - 1, -1, -1):
        ch = t[k]
        if ch == close:
            depth += 1
        elif ch == open_:
            depth -= 1
            if depth == 0:
                return t[:k].rstrip()
    return t


def qualified_name(text: str) -> str:
    """The kernel's qualified name without return type, template arguments and parameters.

    `void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)` -> `at::native::vectorized_elementwise_kernel`.
    Names that are not C++ declarations (`volta_sgemm_128x32_nt`, Triton names) come back whole.
    """
    m = _HEAD.match(text)
    if m and (m.group(1) or m.end() == len(text) or text[m.end()] == "("):
        return m.group(2)  # the common case: [void ]a::b::name followed by '<', '(' or the end
    t = _ANON.sub("{anon}", text.strip())
    if t.endswith(")") or t.endswith(" const"):
        t = _strip_tail_group(t)  # the parameter list
    if t.endswith(">"):
        t = _strip_tail_group(t)  # the template arguments
    # The return type ends at the last top-level space.
    depth = 0
    cut = 0
    for k, ch in enumerate(t):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(0, depth - 1)  # nsys prints some return types unbalanced
        elif ch == " " and depth == 0:
            cut = k + 1
    return t[cut:].replace("{anon}", "(anonymous namespace)")


_WRAPPERS = {"device_kernel", "Kernel", "Kernel2", "enable_sm90_or_later", "enable_sm90", "enable_sm80_to_sm89"}


def base_name(text: str, max_len: int = 80, qn: str | None = None) -> str:
    """A short display name: the last component of the qualified name (`vectorized_elementwise_kernel`).

    For CUTLASS wrappers (`cutlass::device_kernel<X>`, `cutlass::Kernel2<X>`) it is X's base name.
    `qn`: the qualified name when the caller has it already.
    """
    qn = qualified_name(text) if qn is None else qn
    base = qn.rsplit("::", 1)[-1] if "::" in qn else qn
    if base in _WRAPPERS:
        k = text.find(base + "<")
        if k >= 0:
            inner = split_args(text, k + len(base))
            if inner:
                return base_name(inner[0], max_len)
    base = base or text.strip()
    return base if len(base) <= max_len else base[: max_len - 1] + "…"

