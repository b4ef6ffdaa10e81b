"""The docs/SCALE.md table of `ingest_scale.py --rows 1M --repeat N` results, side by side: for each result file
and tool, the median wall and CPU seconds, the peak RSS, and the ratios to the `sqlite3` fetchall peer of the same
run (medians over medians, each repeat's paired ratio's median, and CPU over CPU).

    .venv/bin/python benchmarks/scale_table.py benchmarks/results/A.json [B.json ...]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

PEER = "sqlite3 fetchall kernel+runtime"


def rows(path: Path) -> list[str]:
    results = json.loads(path.read_text())["results"]
    peer = next(r for r in results if r["tool"] == PEER)
    out = []
    for r in results:
        ok = [x for x in r["runs"] if x["ok"]]
        pairs = [x["wall_s"] / p["wall_s"] for x, p in zip(r["runs"], peer["runs"], strict=False)
                 if x["ok"] and p["ok"]]
        wall = statistics.median(x["wall_s"] for x in ok)
        cpu = statistics.median(x["cpu_s"] for x in ok)
        loads = [x["load1"] for x in ok]
        out.append(f"| {path.stem} | {r['tool']} | {wall:.2f} s | {cpu:.2f} | {max(x['rss_mb'] for x in ok):.0f} MiB | "
                   f"{wall / peer['wall_s']:.2f}x | {statistics.median(pairs):.2f}x | {cpu / peer['cpu_s']:.2f}x | "
                   f"{min(loads):.1f}-{max(loads):.1f} |")
    return out


def main() -> None:
    print("| run | command | wall (median) | CPU-s | peak RSS | wall / peer | paired | CPU / peer | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for arg in sys.argv[1:]:
        print("\n".join(rows(Path(arg))))


if __name__ == "__main__":
    main()
