"""The peer of issue 28's scale targets, a bare `sqlite3` fetchall of an Nsight Systems export's kernel and runtime
tables, measured where it cannot be run whole: at 10M kernels the two tables' Python rows need ~21 GB.

    .venv/bin/python benchmarks/nsys_fetch_peer.py EXPORT_1M EXPORT_10M [--whole-max 2M] [--out FILE.json]

Each export is read, one table at a time in a process of its own, two ways: `fetchall` (every row held, as the
peer does; only on exports of at most --whole-max kernels) and `fetchmany` (the same `SELECT *`, rows fetched
65,536 at a time and dropped: the same work per row for SQLite and for Python's row objects, without holding
them). CPU seconds and peak RSS come from wait4's rusage. The peer's CPU at a size it cannot run whole is the
`fetchmany` CPU there times fetchall/fetchmany measured on the smaller export in the same run (both tables
together); its memory, the smaller export's fetchall peak scaled by the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")
READ = {
    "fetchall": "r = c.execute(f'SELECT * FROM {t}').fetchall()",
    "fetchmany": "cur = c.execute(f'SELECT * FROM {t}')\nwhile cur.fetchmany(65536): pass",
}


def _run(path: Path, table: str, how: str) -> dict[str, Any]:
    code = ("import sqlite3, sys\n"
            "c = sqlite3.connect(f'file:{sys.argv[1]}?mode=ro&immutable=1', uri=True)\n"
            f"t = {table!r}\n{READ[how]}\n")
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", code, str(path)])
    _, status, usage = os.wait4(p.pid, 0)
    return {"table": table, "how": how, "ok": status == 0, "wall_s": round(time.perf_counter() - t0, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024)}


def _kernels(path: Path) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return int(con.execute(f"SELECT max(rowid) FROM {TABLES[0]}").fetchone()[0] or 0)
    finally:
        con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("exports", type=Path, nargs="+", help="smallest first: the first one is read whole too")
    ap.add_argument("--whole-max", type=float, default=2e6, help="largest export (kernels) read with fetchall")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for path in args.exports:
        kernels = _kernels(path)
        for how in READ:
            if how == "fetchall" and kernels > args.whole_max:
                continue
            for table in TABLES:
                row = {"export": str(path), "kernels": kernels, **_run(path, table, how)}
                rows.append(row)
                print(f"{kernels:>10} {table:28} {how:10} {row['wall_s']:8.2f} s {row['cpu_s']:8.2f} cpu-s "
                      f"{row['peak_rss_mb']:7} MB", flush=True)

    def total(kernels: int, how: str, key: str) -> float | None:
        got = [r[key] for r in rows if r["kernels"] == kernels and r["how"] == how and r["ok"]]
        return sum(got) if len(got) == len(TABLES) else None

    sizes = sorted({r["kernels"] for r in rows})
    base = sizes[0]
    whole, streamed = total(base, "fetchall", "cpu_s"), total(base, "fetchmany", "cpu_s")
    ratio = whole / streamed if whole and streamed else None
    peer: dict[str, Any] = {}
    for n in sizes:
        cpu = total(n, "fetchall", "cpu_s")
        many = total(n, "fetchmany", "cpu_s")
        measured = cpu is not None
        if cpu is None and many is not None and ratio is not None:
            cpu = many * ratio
        rss = [r["peak_rss_mb"] for r in rows if r["kernels"] == n and r["how"] == "fetchall"]
        base_rss = [r["peak_rss_mb"] for r in rows if r["kernels"] == base and r["how"] == "fetchall"]
        peer[str(n)] = {"fetchall_cpu_s": round(cpu, 2) if cpu is not None else None, "measured": measured,
                        "fetchmany_cpu_s": many,
                        # the two tables' rows held at once: the larger table's peak, plus the other's rows
                        "fetchall_peak_rss_mb": round(sum(rss)) if rss else
                        (round(sum(base_rss) * n / base) if base_rss else None)}
        print(f"peer at {n} kernels: fetchall {peer[str(n)]['fetchall_cpu_s']} cpu-s "
              f"({'measured' if measured else f'fetchmany {many} x {ratio:.3f}' if ratio else 'n/a'}), "
              f"~{peer[str(n)]['fetchall_peak_rss_mb']} MB")
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "fetchall_over_fetchmany": ratio, "peer": peer}, indent=1) + "\n")


if __name__ == "__main__":
    main()
