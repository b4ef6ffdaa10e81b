"""The cells of an Nsight Compute CSV export as ncu prints them: numbers with thousands separators, launch
dimensions, NVTX stack cells, and units auto-scaled on the details page."""

from __future__ import annotations

import re

_DIM3 = re.compile(r"^\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)$")
# A number as ncu prints it: optional thousands separators ("1,020,054", "643,510.05"), decimals, exponent.
_NUMBER = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?$")
# One entry of an NVTX stack cell: `"Domain:Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"`.
_NVTX_ENTRY = re.compile(r'"([^"]*)"')
_NVTX_TRAILING_FIELDS = 6  # PL_Type, PL_Value, CLR_Type, Color, Msg_Type, Msg

# Value ranges of the normalized columns (INTEGER is int32, BIGINT int64).
I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)


def parse_number(text: str) -> float | None:
    """The float value of an ncu cell ("1,234.5" -> 1234.5), or None when it is not a number ("n/a", "")."""
    s = text.strip()
    if not s or s in {"+", "-", "."} or not _NUMBER.match(s) or not any(c.isdigit() for c in s):
        return None
    return float(s.replace(",", ""))


def parse_dim3(text: str) -> tuple[int, int, int] | None:
    """ "(288, 4, 1)" -> (288, 4, 1); None for an empty or malformed cell, or a size beyond int32."""
    m = _DIM3.match(text.strip())
    if not m:
        return None
    dims = (int(m[1]), int(m[2]), int(m[3]))
    return dims if all(d <= I32[1] for d in dims) else None


def _entry_range_text(entry: str, start_stop: bool) -> str | None:
    """The range text of one NVTX stack entry, without domain, payload and colour fields."""
    head = entry.rsplit(":", _NVTX_TRAILING_FIELDS)[0] if entry.count(":") >= _NVTX_TRAILING_FIELDS + 1 else entry
    if start_stop and re.match(r"^\d+:", head):
        head = head.split(":", 1)[1]  # the range id
    text = head.split(":", 1)[1] if ":" in head else head  # the domain ("<default domain>" or a named one)
    text = text.strip()
    return text or None


def innermost_nvtx(cell: str, start_stop: bool = False) -> str | None:
    """The innermost range text of an ncu NVTX cell.

    Push/pop cells read `TID  "Domain:Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"  "..." `, the stack
    from outermost to innermost; the last entry is the innermost. Start/stop cells list the open ranges, each
    optionally prefixed by its range id; the last listed is taken.
    """
    entries = _NVTX_ENTRY.findall(cell)
    for entry in reversed(entries):
        text = _entry_range_text(entry, start_stop)
        if text is not None:
            return text
    return None


# ncu's unit spellings (auto-scaled on the details page unless --print-units base) -> (base unit, factor).
_TIME = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_UNIT = re.compile(r"^([KMGTP]?)(byte|cycle|inst|warp|sector|request|thread|block|hz|Hz)(/second|/s)?$")
_PER_TIME = re.compile(r"^(cycle|inst|byte)/(nsecond|usecond|msecond|second|ns|us|ms|s)$")


def normalize_unit(unit: str, value: float | None) -> tuple[str | None, float | None]:
    """(base unit, value in it): "usecond" 12.5 -> ("ns", 12500.0); "Gbyte/second" -> "byte/second"; "Ghz",
    "cycle/nsecond" -> "hz"; "Kbyte" -> "byte". Units it does not know ("%", "register/thread") are kept."""
    u = unit.strip()
    if not u:
        return None, value
    if u in _TIME:
        return "ns", value * _TIME[u] if value is not None else None
    m = _PER_TIME.match(u)
    if m:
        per = _TIME[m[2]] / 1e9  # seconds per unit of time
        base = "hz" if m[1] == "cycle" else f"{m[1]}/second"
        return base, value / per if value is not None else None
    m = _UNIT.match(u)
    if m:
        base = m[2].lower() if m[2] in ("hz", "Hz") else m[2]
        base = base + "/second" if m[3] else base
        return base, value * _PREFIX[m[1]] if value is not None else None
    return u, value


def int_cell(row: list[str], index: int | None, bounds: tuple[int, int] = I64) -> int | None:
    """The integer in cell `index` when it is one within `bounds`, else None."""
    if index is None:
        return None
    value = parse_number(row[index])
    if value is None or not value.is_integer() or not bounds[0] <= value <= bounds[1]:
        return None
    return int(value)
