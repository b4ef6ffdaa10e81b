"""Times as people read them, in one place: every report, finding and note writes nanoseconds through
`fmt_ns`, so the same duration reads the same everywhere. A leaf module: any stage may import it."""

from __future__ import annotations

_UNITS = (("s", 1e9), ("ms", 1e6), ("us", 1e3), ("ns", 1.0))


def fmt_ns(ns: float | None, missing: str = "-") -> str:
    """850 ns, 12.3 us, 4.56 ms, 123 ms, 1.23 s (three significant digits; `missing` for None)."""
    if ns is None:
        return missing
    value = float(ns)
    for i, (unit, scale) in enumerate(_UNITS):
        if abs(value) >= scale or unit == "ns":
            v = value / scale
            if i > 0 and abs(round(v)) >= 1000:  # 999.6 us reads 1.00 ms, never "1e+03 us"
                unit, v = _UNITS[i - 1][0], v / 1000
            return f"{v:.3g} {unit}" if abs(v) < 100 else f"{v:.0f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover
