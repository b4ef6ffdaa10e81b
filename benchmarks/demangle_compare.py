"""Our demangler (traceinsight/labels/demangle.py) against libstdc++'s `__cxa_demangle`, on every mangled kernel
name in the shared traces and examples/.

Names are read from the files' structure, not scraped from bytes: every string value starting with `_Z` in a Kineto
JSON(.gz) document, every `_Z` string of an Nsight Systems SQLite export's StringIds, every `_Z` cell of a CSV
(Nsight Compute). `.nsys-rep` files are skipped: compressed binary, whose byte-scraped "names" are fragments
(`_Z0`, `_ZN2at6na`); their kernels are in the exported `.sqlite` beside them.

It prints how many names both demangle to the same text, only ours reads, only libstdc++ reads, or both read
differently (each non-identical one listed), then the CPU time per name of each, and their ratio, in one process,
alternating (ours without its lru_cache; libstdc++ through ctypes, as Python calls it, with the free of its
buffer). libstdc++ is the one on this machine (`ctypes.util.find_library("stdc++")`); GCC < 13 cannot read
`DF16b` (std::bfloat16_t).

    .venv/bin/python benchmarks/demangle_compare.py [ROOT ...] [--runs 5] \
        [--out benchmarks/results/demangle_compare.json]
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import ctypes.util
import gzip
import io
import json
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from traceinsight.labels.demangle import demangle

REPO = Path(__file__).resolve().parents[1]
DEFAULT = [REPO.parent / "shared" / "traces", REPO / "examples"]


def libstdcxx() -> Callable[[str], str | None] | None:
    """`__cxa_demangle` of this machine's libstdc++ (None where there is none). tests/test_labels.py uses it too."""
    path = ctypes.util.find_library("stdc++")
    if not path:
        return None
    fn = ctypes.CDLL(path).__cxa_demangle
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    free = ctypes.CDLL(ctypes.util.find_library("c")).free
    free.argtypes = [ctypes.c_void_p]

    def run(name: str) -> str | None:
        status = ctypes.c_int()
        ptr = fn(name.encode(), None, None, ctypes.byref(status))
        if status.value != 0 or not ptr:
            return None
        try:
            return ctypes.string_at(ptr).decode()
        finally:
            free(ptr)

    return run


def _strings(doc: Any) -> Iterator[str]:
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for v in doc.values():
            yield from _strings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _strings(v)


def names_in(path: Path) -> set[str]:
    """The `_Z` names a trace file holds (empty for files that are not traces)."""
    if path.suffix in (".sqlite", ".db"):
        con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        try:
            return {v for (v,) in con.execute("SELECT value FROM StringIds WHERE value LIKE '\\_Z%' ESCAPE '\\'")}
        except sqlite3.Error:
            return set()
        finally:
            con.close()
    if path.name.endswith((".json", ".json.gz")):
        raw = path.read_bytes()
        doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        return {s for s in _strings(doc) if s.startswith("_Z")}
    if path.suffix == ".csv":
        rows = csv.reader(io.StringIO(path.read_text(errors="replace")))
        return {c for row in rows for c in row if c.startswith("_Z")}
    return set()


def collect(roots: list[Path]) -> dict[str, list[str]]:
    """name -> the files (relative to their root's parent) it appears in."""
    out: dict[str, list[str]] = {}
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            for n in names_in(path):
                out.setdefault(n, []).append(str(path.relative_to(root.parent)))
    return out


def cpu_per_name(fn: Callable[[str], Any], names: list[str], loops: int) -> float:
    t0 = time.process_time()
    for _ in range(loops):
        for n in names:
            fn(n)
    return (time.process_time() - t0) / (loops * len(names))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", nargs="*", type=Path, default=DEFAULT)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--loops", type=int, default=20, help="passes over all names per timed run")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    ref = libstdcxx()
    if ref is None:
        raise SystemExit("libstdc++ not found: no reference demangler on this machine")
    theirs, lib = ref, Path(ctypes.util.find_library("stdc++") or "").name
    found = collect(args.roots)
    names = sorted(found)
    ours = demangle.__wrapped__  # type: ignore[attr-defined]  # no cache: each call parses
    verdicts: dict[str, list[str]] = {"identical": [], "only ours": [], "only libstdc++": [], "differing": [],
                                      "neither": []}
    for n in names:
        a, b = ours(n), theirs(n)
        kind = ("identical" if a == b and a is not None else "neither" if a is None and b is None
                else "only ours" if b is None else "only libstdc++" if a is None else "differing")
        verdicts[kind].append(n)
    # Names libstdc++ cannot read for DF16b alone: the same name with Dh (half, also a builtin, never a
    # substitution candidate) in its place must read as ours with `half` spelled std::bfloat16_t.
    bf16 = [n for n in verdicts["only ours"] if "DF16b" in n
            and (theirs(n.replace("DF16b", "Dh")) or "").replace("half", "std::bfloat16_t") == ours(n)]
    print(f"{len(names)} distinct mangled names in {', '.join(str(r) for r in args.roots)} (reference: {lib})")
    for kind, ns in verdicts.items():
        print(f"  {kind:15s} {len(ns)}")
    print(f"  of 'only ours', {len(bf16)} hold DF16b (std::bfloat16_t) and match libstdc++ with DF16b read as Dh")
    for kind in ("only ours", "only libstdc++", "differing", "neither"):
        for n in verdicts[kind]:
            a, b = (x if x is None or len(x) <= 160 else x[:157] + "..." for x in (ours(n), theirs(n)))
            print(f"\n[{kind}] {n[:160]}\n  in:    {found[n][0]}\n  ours:  {a}\n  libstdc++: {b}")
    t_ours, t_theirs = [], []
    for _ in range(args.runs):  # alternating, so load on the machine hits both alike
        t_ours.append(cpu_per_name(ours, names, args.loops))
        t_theirs.append(cpu_per_name(theirs, names, args.loops))
    mo, mt = statistics.median(t_ours), statistics.median(t_theirs)
    print(f"\nCPU per name (median of {args.runs} runs x {args.loops} passes): ours {mo * 1e6:.1f} us, "
          f"libstdc++ via ctypes {mt * 1e6:.1f} us; ours / libstdc++ = {mo / mt:.1f}x")
    if args.out:
        args.out.write_text(json.dumps({
            "reference": lib, "names": len(names), "counts": {k: len(v) for k, v in verdicts.items()},
            "not_identical": {k: v for k, v in verdicts.items() if k != "identical"},
            "only_ours_df16b_match": len(bf16),
            "cpu_us_per_name": {"ours": mo * 1e6, "libstdc++": mt * 1e6}, "ratio_ours_over_libstdcxx": mo / mt,
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
