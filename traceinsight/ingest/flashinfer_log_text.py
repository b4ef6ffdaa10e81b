"""The text of FlashInfer's API log (`flashinfer/api_logging.py`, levels 1-10; flashinfer_log.py says what each
level holds): each call's block parsed into a `Call` (its positional and keyword arguments and unset defaults, as
Python literals, `Tensor` metadata, or the object text of the wrapper), and the header's system information."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_CALL = re.compile(r"^\[([^\]]*)\] FlashInfer API Call: (\S+)\s*$")
_ARG = re.compile(r"^  (?:arg\[(\d+)\]:|([A-Za-z_][A-Za-z0-9_]*)=(?: \[DEFAULT\])?)\s*$")
_OBJECT = re.compile(r" object at (0x[0-9a-fA-F]+)>")
_SECTIONS = ("Positional input arguments:", "Keyword input arguments:",
             "Default parameters (not explicitly provided):")
_RULE = "=" * 80

_HEAD = re.compile(rb"(?m)^\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8}\] "
                   rb"FlashInfer API (?:Call: |Logging - System Information)")


def looks_like_log(head: bytes) -> bool:
    """Whether the first bytes of a (decompressed) file hold a line of FlashInfer's API log (its header, or a call
    line: `[2026-12-04 16:33:39] FlashInfer API Call: ...`)."""
    return _HEAD.search(head) is not None


@dataclass
class Call:
    """One logged API call: its function (`Class.method` or a function name), its arguments as logged."""

    func: str
    line: int
    args: dict[int, Any] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    dump: str | None = None
    detailed: bool = False  # an argument block was logged (level >= 3)

    @property
    def cls(self) -> str:
        return self.func.rsplit(".", 1)[0] if "." in self.func else ""

    @property
    def method(self) -> str:
        return self.func.rsplit(".", 1)[-1]

    @property
    def wrapper(self) -> str | None:
        """The instance's address (`arg[0]`, `<flashinfer.decode.X object at 0x7f...>`), for a method call."""
        m = _OBJECT.search(self.args[0]) if isinstance(self.args.get(0), str) else None
        return m[1] if m else None

    def named(self, names: tuple[str, ...]) -> dict[str, Any]:
        """Arguments by parameter name: positional ones (after self) by `names`, then keywords, then the unset
        defaults the log lists."""
        out = dict(self.defaults)
        for i, v in self.args.items():
            if 1 <= i <= len(names):
                out[names[i - 1]] = v
        out.update(self.kwargs)
        return out


@dataclass
class Tensor:
    """A tensor as the log shows it: metadata, and min/max/mean at level 5."""

    shape: tuple[int, ...]
    dtype: str | None
    stats: dict[str, float]


def _scalar(text: str) -> Any:
    if text.startswith("torch."):
        return text[len("torch."):]  # a torch.dtype: 'bfloat16'
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text  # an object's repr, an enum 'X.Y (value=...)': kept as text


def _tensor(lines: list[str]) -> Tensor:
    shape: tuple[int, ...] = ()
    dtype: str | None = None
    stats: dict[str, float] = {}
    for raw in lines:
        key, _, value = raw.strip().partition("=")
        if key == "shape":
            v = _scalar(value)
            if isinstance(v, tuple) and all(isinstance(x, int) for x in v):
                shape = v
        elif key == "dtype":
            dtype = value.removeprefix("torch.")
        elif key in ("min", "max", "mean"):
            try:
                stats[key] = float(value)
            except ValueError:
                pass
    return Tensor(shape, dtype, stats)


class _Lines:
    """The log's lines, decompressed when gzip'd, with one line of look-ahead."""

    def __init__(self, path: Path) -> None:
        from traceinsight.ingest.byte_stream import Repairs, byte_chunks

        self._chunks = byte_chunks(path, Repairs())
        self._it = self._lines()
        self.number = 0
        self._peeked: str | None = None

    def _lines(self) -> Iterator[str]:
        rest = b""
        for chunk in self._chunks:
            data = rest + chunk
            parts = data.split(b"\n")
            rest = parts.pop()
            for p in parts:
                yield p.decode("utf-8", "replace").rstrip("\r")
        if rest:
            yield rest.decode("utf-8", "replace").rstrip("\r")

    def peek(self) -> str | None:
        if self._peeked is None:
            self._peeked = next(self._it, None)
        return self._peeked

    def next(self) -> str | None:
        line = self.peek()
        self._peeked = None
        if line is not None:
            self.number += 1
        return line


def _value(lines: _Lines) -> Any:
    """The value of one argument: the lines indented by 4 or more that follow its name."""
    first = lines.peek()
    if first is None or not first.startswith("    "):
        return None
    lines.next()
    text = first.strip()
    if text in ("Tensor(", "FP4Tensor(", "[", "(", "{"):
        body: list[str] = []
        close = {"Tensor(": ")", "FP4Tensor(": ")", "[": "]", "(": ")", "{": "}"}[text]
        while (nxt := lines.peek()) is not None and nxt.startswith("    "):
            lines.next()
            if nxt == "    " + close:
                break
            body.append(nxt)
        return _tensor(body) if text == "Tensor(" else text + "...]"
    return _scalar(text)


def parse(path: Path) -> tuple[list[Call], dict[str, str]]:
    """The calls of a log in order, and the system information it starts with (name -> value)."""
    lines = _Lines(path)
    calls: list[Call] = []
    info: dict[str, str] = {}
    pending_dump: str | None = None
    current: Call | None = None
    section: str | None = None
    while (line := lines.next()) is not None:
        m = _CALL.match(line)
        if m:
            current = Call(func=m[2], line=lines.number)
            if pending_dump is not None and f"_{m[2]}_call" in Path(pending_dump).name:
                current.dump = pending_dump
            pending_dump = None
            section = None
            calls.append(current)
            continue
        if line.startswith("Inputs dumped to: "):
            pending_dump = line[len("Inputs dumped to: "):].strip()
            continue
        if line in _SECTIONS:
            section = line
            if current is not None:
                current.detailed = True
            continue
        if current is not None and section is not None:
            a = _ARG.match(line)
            if a:
                value = _value(lines)
                if a[1] is not None:
                    current.args[int(a[1])] = value
                elif section == _SECTIONS[2]:
                    current.defaults[a[2]] = value
                else:
                    current.kwargs[a[2]] = value
                continue
            if line.startswith("  "):
                continue
        section = None  # "Output value:", a rule, another process's output: the argument block is over
        if current is None and ": " in line and not line.startswith((" ", "=", "-", "[")):
            key, _, value = line.partition(": ")
            info.setdefault(key.strip(), value.strip())
        elif line.startswith("  GPU ") and ": " in line:
            info.setdefault("GPU", line.partition(": ")[2].strip())
    return calls, info
