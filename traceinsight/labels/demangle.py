"""A small Itanium C++ ABI demangler for CUDA kernel names (`_Z...`), in pure Python.

Nsight Systems exports keep `mangledName` beside the demangled one, and some tools print only the
mangled form. The labeler reads names as text, so it turns mangled names back into the style of
libstdc++'s `__cxa_demangle` (the style Kineto traces carry): `2u`, `false`, `(flashinfer::MaskMode)0`,
`{lambda()#1}`, `(anonymous namespace)`, `> >`.

It covers what kernel names use: nested and local names, template arguments and literals, substitutions
(`S_`, `S0_`, `St`...), template parameters (`T_`), pointers/references/cv-qualifiers, function types,
lambdas and unnamed types, ABI tags. Anything else (expressions, decltype, ...) makes `demangle` return
None, and callers fall back to the raw text. It never raises.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["demangle"]

_BUILTIN = {
    "v": "void", "w": "wchar_t", "b": "bool", "c": "char", "a": "signed char", "h": "unsigned char",
    "s": "short", "t": "unsigned short", "i": "int", "j": "unsigned int", "l": "long",
    "m": "unsigned long", "x": "long long", "y": "unsigned long long", "n": "__int128",
    "o": "unsigned __int128", "f": "float", "d": "double", "e": "long double", "g": "__float128",
    "z": "...",
}
_BUILTIN_D = {
    "Dn": "decltype(nullptr)", "Df": "decimal32", "Dd": "decimal64", "De": "decimal128", "Dh": "half",
    "Di": "char32_t", "Ds": "char16_t", "Du": "char8_t", "Da": "auto", "Dc": "decltype(auto)",
}
# Integer literal suffixes in libstdc++'s style; other literal types print as "(type)value".
_LITERAL_SUFFIX = {"i": "", "j": "u", "l": "l", "m": "ul", "x": "ll", "y": "ull"}
_STD_ABBREV = {
    "St": "std", "Sa": "std::allocator", "Sb": "std::basic_string",
    "Ss": "std::string", "Si": "std::istream", "So": "std::ostream", "Sd": "std::iostream",
}
_OPERATORS = {
    "nw": "new", "na": "new[]", "dl": "delete", "da": "delete[]", "ps": "+", "ng": "-", "ad": "&",
    "de": "*", "co": "~", "pl": "+", "mi": "-", "ml": "*", "dv": "/", "rm": "%", "an": "&", "or": "|",
    "eo": "^", "aS": "=", "pL": "+=", "mI": "-=", "mL": "*=", "dV": "/=", "rM": "%=", "aN": "&=",
    "oR": "|=", "eO": "^=", "ls": "<<", "rs": ">>", "lS": "<<=", "rS": ">>=", "eq": "==", "ne": "!=",
    "lt": "<", "gt": ">", "le": "<=", "ge": ">=", "ss": "<=>", "nt": "!", "aa": "&&", "oo": "||",
    "pp": "++", "mm": "--", "cm": ",", "pm": "->*", "pt": "->", "cl": "()", "ix": "[]", "qu": "?",
}


class _Fail(Exception):
    """The name uses a part of the grammar this demangler does not cover."""


class _Node:
    """A demangled entity: its text, and (for names) whether it ends in template arguments."""

    __slots__ = ("text", "targs", "cv", "is_ctor")

    def __init__(self, text: str, targs: list[str] | None = None, cv: str = "", is_ctor: bool = False):
        self.text = text
        self.targs = targs
        self.cv = cv
        self.is_ctor = is_ctor


def _join_targs(args: list[str]) -> str:
    inner = ", ".join(args)
    return "<" + inner + (" >" if inner.endswith(">") else ">")


class _Parser:
    def __init__(self, s: str):
        self.s = s
        self.i = 0
        self.subs: list[str] = []

    # ---- low level -------------------------------------------------------------------------
    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def take(self, ch: str) -> None:
        if self.peek() != ch:
            raise _Fail(f"expected {ch!r} at {self.i}")
        self.i += 1

    def number(self) -> int:
        neg = self.peek() == "n"
        if neg:
            self.i += 1
        j = self.i
        while self.peek().isdigit():
            self.i += 1
        if j == self.i:
            raise _Fail("number")
        v = int(self.s[j:self.i])
        return -v if neg else v

    def seq_id(self) -> int:
        """Base-36 sequence id before '_' (empty = 0, '0' = 1, ...)."""
        if self.peek() == "_":
            self.i += 1
            return 0
        j = self.i
        while self.peek() and self.peek() != "_":
            self.i += 1
        self.take("_")
        return int(self.s[j:self.i - 1], 36) + 1

    # ---- encodings and names ---------------------------------------------------------------
    def encoding(self, local: bool = False) -> str:
        """<name> [<function type>]. Inside a local name (`local`) the return type is not printed."""
        name = self.name()
        if self.peek() in ("", "E", "."):
            return name.text
        ret = ""
        if name.targs is not None and not name.is_ctor:
            ret = self.type() + " "
        params = self.bare_function_type()
        if name.targs is not None:  # template parameters in the signature are this function's
            ret, params = _resolve(ret, name.targs), _resolve(params, name.targs)
        return f"{'' if local else ret}{name.text}({params}){name.cv}"

    def bare_function_type(self) -> str:
        types: list[str] = []
        while self.peek() not in ("", "E", "."):
            types.append(self.type())
        if not types:  # a signature has at least one type (`v` for none): `..EEv` alone is a cut name
            raise _Fail("empty signature")
        if types == ["void"]:
            return ""
        return ", ".join(types)

    def name(self) -> _Node:
        c = self.peek()
        if c == "N":
            return self.nested_name()
        if c == "Z":
            return self.local_name()
        if c == "S" and self.peek(1) != "t":
            node = _Node(self.substitution())
            if self.peek() == "I":
                targs = self.template_args()
                return _Node(node.text + _join_targs(targs), targs)
            return node
        prefix = ""
        if c == "S":  # St: std::
            self.i += 2
            prefix = "std::"
        node = self.unqualified_name()
        text = prefix + node.text
        if self.peek() == "I":
            self.subs.append(text)
            targs = self.template_args()
            return _Node(text + _join_targs(targs), targs, is_ctor=node.is_ctor)
        return _Node(text, None, is_ctor=node.is_ctor)

    def nested_name(self) -> _Node:
        self.take("N")
        cv = self.cv_qualifiers()
        if self.peek() in ("R", "O"):  # ref-qualifier of a member function
            cv += " &" if self.peek() == "R" else " &&"
            self.i += 1
        text = ""
        targs: list[str] | None = None
        is_ctor = False
        last_plain = ""
        while True:
            c = self.peek()
            if c == "":
                raise _Fail("unterminated nested name")
            if c == "E":
                self.i += 1
                break
            from_subst = False
            if c == "I":
                if not text:
                    raise _Fail("template args without a name")
                targs = self.template_args()
                text += _join_targs(targs)
            elif c == "S" and self.peek(1) == "t":
                self.i += 2
                text = (text + "::" if text else "") + "std"
                continue
            elif c == "S":
                text = self.substitution()
                from_subst = True
                targs = None
            elif c == "T":
                text = self.template_param()
                targs = None
            elif c == "M":  # closure prefix of a lambda in a default argument/initializer
                self.i += 1
                continue
            else:
                node = self.unqualified_name(enclosing=last_plain)
                is_ctor = node.is_ctor
                last_plain = node.text
                text = (text + "::" if text else "") + node.text
                targs = None
            if not from_subst and self.peek() != "E":
                self.subs.append(text)
            if from_subst:
                last_plain = text.rsplit("::", 1)[-1]
        return _Node(text, targs, cv, is_ctor)

    def local_name(self) -> _Node:
        self.take("Z")
        enc = self.encoding(local=True)
        self.take("E")
        if self.peek() == "s":
            self.i += 1
            self.discriminator()
            return _Node(enc + "::string literal")
        inner = self.name()
        self.discriminator()
        return _Node(enc + "::" + inner.text, inner.targs, inner.cv, inner.is_ctor)

    def discriminator(self) -> None:
        if self.peek() == "_":
            self.i += 1
            if self.peek() == "_":
                self.i += 1
                self.number()
                self.take("_")
            else:
                self.number()

    def unqualified_name(self, enclosing: str = "") -> _Node:
        c = self.peek()
        if c == "L":  # internal linkage
            self.i += 1
            c = self.peek()
        if c.isdigit():
            node = _Node(self.source_name())
        elif c == "U":
            node = _Node(self.unnamed_type())
        elif c == "C" and self.peek(1) in "12345I":
            self.i += 2
            base = enclosing.split("<", 1)[0]
            node = _Node(base, is_ctor=True)
        elif c == "D" and self.peek(1) in "012":
            self.i += 2
            base = enclosing.split("<", 1)[0]
            node = _Node("~" + base, is_ctor=True)
        elif c == "c" and self.peek(1) == "v":
            self.i += 2
            node = _Node("operator " + self.type(), is_ctor=True)
        elif c.islower() and self.s[self.i:self.i + 2] in _OPERATORS:
            op = _OPERATORS[self.s[self.i:self.i + 2]]
            self.i += 2
            node = _Node("operator" + (" " if op[0].isalpha() else "") + op)
        else:
            raise _Fail(f"unqualified name at {self.i}")
        while self.peek() == "B":  # ABI tags
            self.i += 1
            node.text += "[abi:" + self.source_name() + "]"
        return node

    def source_name(self) -> str:
        n = self.number()
        ident = self.s[self.i:self.i + n]
        if n <= 0 or len(ident) != n:  # `_Z0`: no identifier is empty
            raise _Fail("short identifier")
        self.i += n
        if ident.startswith("_GLOBAL__N"):
            return "(anonymous namespace)"
        return ident

    def unnamed_type(self) -> str:
        self.take("U")
        kind = self.peek()
        self.i += 1
        if kind == "t":
            n = 1 if self.peek() == "_" else self.number() + 2
            self.take("_")
            return f"{{unnamed type#{n}}}"
        if kind == "l":
            params = self.bare_function_type()
            self.take("E")
            n = 1 if self.peek() == "_" else self.number() + 2
            self.take("_")
            return f"{{lambda({params})#{n}}}"
        raise _Fail("unnamed type")

    # ---- substitutions and template parameters ------------------------------------------------
    def substitution(self) -> str:
        self.take("S")
        two = "S" + self.peek()
        if two in _STD_ABBREV:
            self.i += 1
            return _STD_ABBREV[two]
        k = self.seq_id()
        if k >= len(self.subs):
            raise _Fail("substitution out of range")
        return self.subs[k]

    def template_param(self) -> str:
        """A placeholder, resolved by the function encoding that uses it (as libiberty resolves it at
        print time: a substitution of `T1_` means the third template argument of whichever function's
        signature refers to it)."""
        self.take("T")
        return f"\x01{self.seq_id()}\x02"

    def template_args(self) -> list[str]:
        self.take("I")
        args: list[str] = []
        while self.peek() != "E":
            if self.peek() == "":
                raise _Fail("unterminated template args")
            args.append(self.template_arg())
        self.i += 1
        return args

    def template_arg(self) -> str:
        c = self.peek()
        if c == "L":
            return self.literal()
        if c == "J":  # argument pack
            self.i += 1
            items: list[str] = []
            while self.peek() != "E":
                if self.peek() == "":
                    raise _Fail("unterminated pack")
                items.append(self.template_arg())
            self.i += 1
            return ", ".join(items)
        if c == "X":
            raise _Fail("expression")
        return self.type()

    def literal(self) -> str:
        self.take("L")
        if self.peek() == "_" and self.peek(1) == "Z":
            self.i += 2
            enc = self.encoding()
            self.take("E")
            return "&" + enc.split("(", 1)[0] if "(" in enc else "&" + enc
        if self.s.startswith("DnE", self.i):
            self.i += 3
            return "nullptr"
        code = self.peek()
        if code == "b":
            self.i += 1
            v = self.number()
            self.take("E")
            return "true" if v else "false"
        if code in _LITERAL_SUFFIX:
            self.i += 1
            v = self.number()
            self.take("E")
            return f"{v}{_LITERAL_SUFFIX[code]}"
        tname = self.type()
        j = self.i
        while self.peek() not in ("E", ""):
            self.i += 1
        raw = self.s[j:self.i]
        self.take("E")
        value = "-" + raw[1:] if raw.startswith("n") else raw
        return f"({tname}){value}"

    # ---- types ----------------------------------------------------------------------------------
    def cv_qualifiers(self) -> str:
        out = ""
        while self.peek() in ("r", "V", "K"):
            out += {"r": " restrict", "V": " volatile", "K": " const"}[self.peek()]
            self.i += 1
        return out

    def type(self) -> str:
        c = self.peek()
        if c in _BUILTIN:
            self.i += 1
            return _BUILTIN[c]
        if c == "u":
            self.i += 1
            return self.source_name()
        if c == "D":
            two = self.s[self.i:self.i + 2]
            if two in _BUILTIN_D:
                self.i += 2
                return _BUILTIN_D[two]
            if two == "DF":  # _FloatN; DF16b is std::bfloat16_t (ROCm/HIP kernels such as aiter's use it)
                self.i += 2
                if self.s.startswith("16b", self.i):
                    self.i += 3
                    return "std::bfloat16_t"
                n = self.number()
                self.take("_")
                return f"_Float{n}"
            if two == "Dp":
                self.i += 2
                t = self.type()
                self.subs.append(t)
                return t
            raise _Fail("D-type")
        if c in ("r", "V", "K"):
            cv = self.cv_qualifiers()
            inner = self.type()
            t = inner + cv
            self.subs.append(t)
            return t
        if c in ("P", "R", "O"):
            self.i += 1
            inner = self.type()
            mark = {"P": "*", "R": "&", "O": "&&"}[c]
            t = self.attach(inner, mark)
            self.subs.append(t)
            return t
        if c == "F":
            self.i += 1
            if self.peek() == "Y":
                self.i += 1
            ret = self.type()
            params = self.bare_function_type()
            if self.peek() in ("R", "O"):
                self.i += 1
            self.take("E")
            t = f"{ret} ({params})"
            self.subs.append(t)
            return t
        if c == "A":
            self.i += 1
            dim = ""
            if self.peek().isdigit():
                dim = str(self.number())
            self.take("_")
            t = f"{self.type()} [{dim}]"
            self.subs.append(t)
            return t
        if c == "T":
            t = self.template_param()
            self.subs.append(t)
            if self.peek() == "I":
                t += _join_targs(self.template_args())
                self.subs.append(t)
            return t
        if c == "S" and self.peek(1) != "t":
            t = self.substitution()
            if self.peek() == "I":
                t += _join_targs(self.template_args())
                self.subs.append(t)
            return t
        if c.isdigit() or c in ("N", "Z", "S", "U"):
            node = self.name()
            self.subs.append(node.text)
            return node.text
        raise _Fail(f"type {c!r} at {self.i}")

    @staticmethod
    def attach(inner: str, mark: str) -> str:
        """Pointer/reference to `inner`; to a function or array type it goes inside: `void (*)(int)`."""
        if inner.endswith(")") and " (" in inner:
            ret, params = inner.split(" (", 1)
            return f"{ret} ({mark})({params}"
        if inner.endswith("]") and " [" in inner:
            elem, dim = inner.rsplit(" [", 1)
            return f"{elem} ({mark}) [{dim}"
        return inner + mark


_PARAM = re.compile("\x01(\\d+)\x02")


def _resolve(text: str, targs: list[str]) -> str:
    """Replace template-parameter placeholders by the arguments `targs`."""
    if "\x01" not in text:
        return text
    return _PARAM.sub(lambda m: targs[int(m.group(1))] if int(m.group(1)) < len(targs) else _unnamed(m), text)


def _unnamed(m: re.Match[str]) -> str:
    k = int(m.group(1))
    return f"T{k}" if k else "T"


@lru_cache(maxsize=65536)
def demangle(name: str) -> str | None:
    """The demangled text of an Itanium-mangled name (`_Z...`), or None when it is not one we can read."""
    if not name.startswith("_Z"):
        return None
    p = _Parser(name)
    p.i = 2
    try:
        out = p.encoding()
    except (_Fail, ValueError, IndexError, RecursionError):
        return None
    if p.i < len(name) and name[p.i] != ".":
        return None
    return _PARAM.sub(_unnamed, out)
