"""How much of a trace's GPU kernel time the labeler names: `python tests/label_coverage.py TRACE...`.

For each trace (Kineto JSON[.gz] or Nsight Systems SQLite) it prints the share of kernel time whose label has a
family other than 'other' (named), the share matched by any rule (recognised), and the largest unnamed kernels.
Kernel events are read straight from the file (json/sqlite3), independently of the project's readers.
"""

from __future__ import annotations

import gzip
import sqlite3
import sys
from collections import Counter
from pathlib import Path

import orjson

from traceinsight.labels import label


def kernel_times(path: Path) -> Counter[str]:
    """Kernel name -> total duration (any unit; shares are what matter)."""
    out: Counter[str] = Counter()
    if path.suffix in (".sqlite", ".db"):
        con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        try:
            q = ("SELECT s.value, sum(k.\"end\" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                 "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value")
            for name, d in con.execute(q):
                out[name] += int(d)
        finally:
            con.close()
        return out
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = orjson.loads(raw)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    for e in events:
        if str(e.get("cat", "")).lower() == "kernel":
            out[e["name"]] += float(e.get("dur", 0) or 0)
    return out


def coverage(times: Counter[str]) -> tuple[float, float, list[tuple[float, str]], dict[str, float]]:
    """(named share, recognised share, largest unnamed (share, name), share per family/backend)."""
    total = sum(times.values()) or 1.0
    named = recognised = 0.0
    unnamed: list[tuple[float, str]] = []
    fams: Counter[str] = Counter()
    for name, t in times.items():
        lab = label(name)
        fams[f"{lab.family}/{lab.backend}"] += t / total
        if lab.family != "other":
            named += t
        else:
            unnamed.append((t / total, name))
        if lab.rule != "fallback":
            recognised += t
    unnamed.sort(reverse=True)
    return named / total, recognised / total, unnamed, dict(fams)


def main(argv: list[str]) -> int:
    for arg in argv:
        p = Path(arg)
        times = kernel_times(p)
        if not times:
            print(f"{p.name}: no kernel events")
            continue
        named, recognised, unnamed, fams = coverage(times)
        print(f"{p.name}: {len(times)} kernels, named {100 * named:.1f} %, recognised {100 * recognised:.1f} %")
        for fam, share in sorted(fams.items(), key=lambda kv: -kv[1])[:8]:
            print(f"    {100 * share:5.1f} %  {fam}")
        for share, name in unnamed[:5]:
            print(f"    unnamed {100 * share:5.2f} %  {name[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
