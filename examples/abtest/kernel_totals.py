"""Per-kernel time totals of two captures side by side (stdlib only, with ../loop/step_times.py's readers):

    python examples/abtest/kernel_totals.py BEFORE AFTER [--min-ms 0.3]

BEFORE / AFTER are Kineto `.pt.trace.json(.gz)` or Nsight Systems `.sqlite` captures of collectors/abtest.py.
Kernels inside the step ranges (a Kineto trace without ProfilerStep ranges: all its kernels) are grouped by their
name up to the first '(' (Nsight Systems' `<unnamed>` read as Kineto's `(anonymous namespace)`); prints launches,
total ms of each and the change, largest first.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _step_times() -> object:
    spec = importlib.util.spec_from_file_location("loop_step_times", HERE.parent / "loop" / "step_times.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _all_kineto_kernels(path: Path) -> list[tuple[str, int, int]]:
    """Every kernel of a Kineto trace (ns): for captures without ProfilerStep ranges (the FA3 sweep's steps are
    record_function ranges, one per step, and hold nothing else)."""
    doc = json.loads(gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes())
    return [(e["name"], int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)) for e in doc["traceEvents"]
            if e.get("cat") == "kernel"]


def totals(path: Path) -> tuple[collections.Counter[str], collections.Counter[str]]:
    st = _step_times()
    steps = st.nsys_steps(path) if path.suffix == ".sqlite" else st.kineto_steps(path)  # type: ignore[attr-defined]
    kernels = [k for s in steps for k in s.kernels] if steps else _all_kineto_kernels(path)
    ms: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for name, start, end in kernels:
        key = name.replace("<unnamed>", "(anonymous namespace)").split("(")[0].removeprefix("void ")[:70]
        ms[key] += (end - start) / 1e6
        count[key] += 1
    return ms, count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--min-ms", type=float, default=0.3, help="leave out kernels under this total in both")
    a = ap.parse_args()
    (ma, ca), (mb, cb) = totals(a.before), totals(a.after)
    print(f"{'kernel':70s} {'n':>4s} {'before':>8s} {'n':>4s} {'after':>8s} {'change':>7s}")
    for k in sorted(set(ma) | set(mb), key=lambda k: -(ma[k] + mb[k])):
        if max(ma[k], mb[k]) >= a.min_ms:
            change = f"{100 * (mb[k] / ma[k] - 1):+6.1f}%" if ma[k] else "    new"
            print(f"{k:70s} {ca[k]:4d} {ma[k]:8.2f} {cb[k]:4d} {mb[k]:8.2f} {change}")
    print(f"{'all kernels in steps':70s} {sum(ca.values()):4d} {sum(ma.values()):8.2f} {sum(cb.values()):4d} "
          f"{sum(mb.values()):8.2f} {100 * (sum(mb.values()) / sum(ma.values()) - 1):+6.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
