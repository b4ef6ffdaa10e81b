"""`report/tables.py` `write_tables` against a reference checkout, in one run: CPU-s per analysis table of the
reference's write_tables and this checkout's, on the same analysis, and whether the two wrote identical tables
(every table's full contents as Arrow, ordered by every column, and its column types); and CPU-s of one
write_tables call writing every table on each side ("one call": what `analyze` pays, work shared by the tables
done once).

    git clone -q <repo> /tmp/ref
    python -P benchmarks/tables_speed.py TRACE [--meta SIDECAR] [--ncu CSV] [--ref /tmp/ref] [--only new|old]

The trace is analyzed once, by this checkout. The reference's modules that differ from this checkout's (any file
under traceinsight/) are loaded from the reference and stand in for ours while its write_tables runs: the
tables module and what it calls (json_doc, gantt, ...). `--only`: run one side alone, no comparison, and report
its peak RSS above the RSS before write_tables (a fresh process per side: memory freed by one side is reused by
the other). Exits 1 when the tables differ.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _differing(ref: Path) -> list[str]:
    """Module names of traceinsight/ files whose text differs between the reference and this checkout."""
    names = []
    for path in sorted((ref / "traceinsight").rglob("*.py")):
        rel = path.relative_to(ref)
        ours = REPO / rel
        if ours.exists() and ours.read_bytes() == path.read_bytes():
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


class _RefFinder:
    """Serves `names` from the reference checkout while it is on sys.meta_path."""

    def __init__(self, ref: Path, names: list[str]) -> None:
        self.ref, self.names = ref, set(names)

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.names:
            return None
        base = self.ref.joinpath(*name.split("."))
        file = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        return importlib.util.spec_from_file_location(name, file)


class Swap:
    """The reference's differing modules in place of ours (sys.modules and their parents' attributes)."""

    def __init__(self, ref: Path) -> None:
        self.names = _differing(ref)
        self.finder = _RefFinder(ref, self.names)
        self.theirs: dict[str, ModuleType] = {}

    @contextlib.contextmanager
    def reference(self) -> Iterator[None]:
        ours = {n: sys.modules[n] for n in self.names if n in sys.modules}
        for n in self.names:
            sys.modules.pop(n, None)
        sys.modules.update(self.theirs)
        self._attrs(self.theirs)
        sys.meta_path.insert(0, self.finder)
        try:
            yield
        finally:
            sys.meta_path.remove(self.finder)
            self.theirs = {n: sys.modules[n] for n in self.names if n in sys.modules}
            for n in self.names:
                sys.modules.pop(n, None)
                parent, _, leaf = n.rpartition(".")
                if n not in ours and parent in sys.modules:  # else `from parent import leaf` finds theirs
                    sys.modules[parent].__dict__.pop(leaf, None)
            sys.modules.update(ours)
            self._attrs(ours)

    @staticmethod
    def _attrs(mods: dict[str, ModuleType]) -> None:
        for n, m in mods.items():
            parent, _, leaf = n.rpartition(".")
            if parent in sys.modules:
                setattr(sys.modules[parent], leaf, m)


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _write(module: Any, db: Any, a: Any) -> dict[str, float]:
    """CPU-s per table of module.write_tables (one table at a time: its ANALYSIS_TABLES narrowed to it), each
    table emptied of the trace's rows first, untimed (the side that runs second would delete the first's). CPU-s
    of the process: DuckDB's threads too."""
    names = tuple(module.ANALYSIS_TABLES)
    out = {}
    try:
        for name in names:
            module.ANALYSIS_TABLES = (name,)
            db.con.execute(f"DELETE FROM {name} WHERE trace_id = ?", [a.trace_id])  # the other side's rows
            t0 = time.process_time()
            module.write_tables(db, [a])
            out[name] = time.process_time() - t0
    finally:
        module.ANALYSIS_TABLES = names
    return out


def _write_all(module: Any, db: Any, a: Any) -> float:
    """CPU-s of one module.write_tables call writing every table, as `analyze` calls it (work a module shares
    between its tables done once; the rows of each table deleted first, untimed)."""
    for name in module.ANALYSIS_TABLES:
        db.con.execute(f"DELETE FROM {name} WHERE trace_id = ?", [a.trace_id])
    t0 = time.process_time()
    module.write_tables(db, [a])
    return time.process_time() - t0


def _contents(db: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {n: db.con.sql(f"SELECT * FROM {n} ORDER BY ALL").to_arrow_table() for n in names}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", type=Path)
    ap.add_argument("--meta", type=Path, action="append", default=[])
    ap.add_argument("--ncu", type=Path, action="append", default=[])
    ap.add_argument("--ref", type=Path, default=Path("/tmp/ref-wtT"))
    ap.add_argument("--only", choices=("new", "old"))
    args = ap.parse_args()
    swap = Swap(args.ref)
    with swap.reference():
        import traceinsight.report.tables as old  # the reference's, when it differs
    import traceinsight.pipeline as pipeline
    import traceinsight.report.tables as new

    t0 = time.process_time()
    db, (a,) = pipeline.analyze([args.trace], meta=args.meta, ncu=args.ncu, cache=False)
    print(f"{args.trace.name}: analyzed in {time.process_time() - t0:.1f} CPU-s; reference modules: "
          f"{', '.join(swap.names) or 'none differ'}", flush=True)
    if args.only:
        import gc

        gc.collect()
        Path("/proc/self/clear_refs").write_text("5")  # the peak RSS from here
        before = _rss_kib("VmRSS")
        if args.only == "old":
            with swap.reference():
                times = _write(old, db, a)
        else:
            times = _write(new, db, a)
        peak = _rss_kib("VmHWM")
        print(f"{args.only}: {sum(times.values()):.2f} CPU-s, RSS {before / 1024:.0f} MiB before, peak "
              f"+{(peak - before) / 1024:.0f} MiB during write_tables", flush=True)
        os._exit(0)
    with swap.reference():
        before = _write(old, db, a)
    names = tuple(new.ANALYSIS_TABLES)
    want = _contents(db, names)
    after = _write(new, db, a)
    got = _contents(db, names)
    same = True
    print(f"{'table':20} {'rows':>8} {'old':>7} {'new':>7} {'new/old':>7}  identical")
    for n in names:
        equal = want[n].schema == got[n].schema and want[n].equals(got[n])
        same &= equal
        ratio = after[n] / before[n] if before[n] else float("nan")
        print(f"{n:20} {got[n].num_rows:8} {before[n]:7.2f} {after[n]:7.2f} {ratio:7.2f}  {equal}")
    total_old, total_new = sum(before.values()), sum(after.values())
    print(f"{'all':20} {'':8} {total_old:7.2f} {total_new:7.2f} {total_new / total_old:7.2f}  {same}", flush=True)
    with swap.reference():
        whole_old = _write_all(old, db, a)
    whole_new = _write_all(new, db, a)
    print(f"{'one call':20} {'':8} {whole_old:7.2f} {whole_new:7.2f} {whole_new / whole_old:7.2f}", flush=True)
    os._exit(0 if same else 1)


if __name__ == "__main__":
    main()
