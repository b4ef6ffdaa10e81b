"""Whether this checkout's ingest of a trace fills the normalized tables as a reference checkout's does, row for row
and in the same row order: a digest of every table (each row as text, in DuckDB's row order) from each, in a
process of its own, so a large export (one read a slice at a time) is checked without holding two databases.

    .venv/bin/python -P benchmarks/ingest_identical.py TRACE [TRACE ...] --ref /tmp/ref35 [--entry]

`--entry`: the tables of the ingest cache's entry instead, as a cold analysis (`pipeline.analyze`, cache on, an
empty cache folder of its own) writes it.
Prints one line per table that differs (or "identical") per trace; exits 1 if any differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

_CHILD = """
import json, os, shutil, sys, tempfile
from pathlib import Path
import duckdb
from traceinsight.ingest import load
from traceinsight.ingest.schema import table_names
folder = tempfile.mkdtemp(prefix="ti-entry-")
try:
    if sys.argv[2] == "entry":
        from traceinsight.pipeline import analyze
        os.environ["TRACEINSIGHT_CACHE_DIR"] = folder
        analyze([Path(sys.argv[1])], cache=True)[0].close()
        (entry,) = (Path(folder) / "db").glob("*.duckdb")
        con = duckdb.connect(str(entry), read_only=True)
    else:
        con = load([Path(sys.argv[1])], cache=False)[0].con
    out = {}
    for t in table_names():
        skip = " EXCLUDE (size_bytes)" if t == "traces" else ""
        order = "kernel_id" if t == "kernels" else "rowid"  # a view (session 40) has no rowid: its rows in id order
        out[t] = con.execute(f"SELECT count(*), md5(string_agg(md5(CAST(x AS VARCHAR)), ',' ORDER BY r)) FROM "
                             f"(SELECT *{skip}, {order} AS r FROM {t}) x").fetchone()
    print(json.dumps(out))
finally:
    shutil.rmtree(folder)
"""


def _digests(trace: Path, pythonpath: str | None, entry: bool = False) -> dict[str, list[object]]:
    env = {**os.environ, "TRACEINSIGHT_CACHE": "0", "TRACEINSIGHT_CACHE_MIN_BYTES": "0"}
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run([sys.executable, "-P", "-c", _CHILD, str(trace), "entry" if entry else "db"], env=env,
                         check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", type=Path, nargs="+")
    ap.add_argument("--ref", type=Path, required=True)
    ap.add_argument("--entry", action="store_true", help="compare the ingest cache entries a cold analysis writes")
    args = ap.parse_args()
    status = 0
    for trace in args.traces:
        mine, ref = _digests(trace, None, args.entry), _digests(trace, str(args.ref), args.entry)
        differ = [t for t in sorted(set(mine) | set(ref)) if mine.get(t) != ref.get(t)]
        rows = sum(int(v[0]) for v in mine.values())  # type: ignore[call-overload]
        print(f"{trace}: " + ("identical" if not differ else "DIFFER: " + ", ".join(
            f"{t} ({mine.get(t)} vs {ref.get(t)})" for t in differ)) + f" ({len(mine)} tables, {rows} rows)")
        status |= bool(differ)
    sys.exit(status)


if __name__ == "__main__":
    main()
