"""`fleet report`: the report across the traces of a fleet dataset (docs/FLEET.md), from the dataset alone.

`build(root, top)` reads the manifest and the dataset's `summary`, `steps` and `findings` tables (DuckDB over the
hive-partitioned Parquet files; the queries are `traceinsight/queries/fleet_*.sql`) into one document (schema
`traceinsight.fleet-report/1`, times in ns, shares as fractions 0..1, links relative to the dataset folder):

- overview: traces ok / failed / pending, the GPUs, the steps' wall time and the time between steps, and the time
  lost: the root causes' savings, each bounded step by step by the time it comes from (so never more than there
  was);
- root causes: per rule, the traces it is a root cause in (and their share of the analyzed traces), the steps
  its findings name, the time it cost and the trace it cost most; rules that fired only as evidence of another
  root cause, apart;
- traces: per trace its GPU, steps, p50/p99 step (GPU span of the step's kernels), root causes with what each
  cost, the time lost, and its own reports (`reports/<trace>.html|json`);
- worst steps: the `top` slowest steps of the fleet, with their trace, name, time against the trace's median
  step, the findings that name them, and a link to the trace's report (its step-time chart);
- outliers: traces that stand out from the others on their GPU (`report.fleet.FLEET_RULES`);
- failed: the traces that could not be analyzed, with their errors (from the manifest), and any still pending.

Renderers (`fleet/render.py`): `render_text` (rich), `render_html` (self-contained, no script and no URL),
`render_markdown`.
Only traces the manifest records as analyzed ('ok') are read, so the files of an interrupted analysis never
count.
"""

from __future__ import annotations

import os
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceinsight import __version__
from traceinsight.errors import InputError
from traceinsight.fleet.dataset import read_manifest
from traceinsight.queries import sql

if TYPE_CHECKING:
    import duckdb

SCHEMA = "traceinsight.fleet-report/1"
TOP = 10
HTML_NAME = "fleet.html"  # where `fleet report --format html` writes by default: into the dataset folder
# The report's anchor in a trace's own HTML report for a step: its step-time chart (the per-trace report has no
# element per step).
STEP_ANCHOR = "timeline"

# Columns of the tables the queries read, typed for a dataset that has no file of a table yet (every trace
# failed, or none was analyzed): the query then runs on an empty table instead of failing on a missing glob.
_EMPTY = {
    "summary": "trace VARCHAR, gpu VARCHAR, steps BIGINT, step_p50_ns BIGINT, step_p99_ns BIGINT, "
               "step_max_ns BIGINT, split_kv_off_share DOUBLE, critical BIGINT, warning_findings BIGINT, "
               "infos BIGINT, steps_wall_ns BIGINT, between_steps_ns BIGINT, saving_ns BIGINT",
    "steps": "trace VARCHAR, step INTEGER, name VARCHAR, dur_ns BIGINT, wall_ns BIGINT, split_kv BOOLEAN",
    "findings": "trace VARCHAR, finding INTEGER, rule_id VARCHAR, severity VARCHAR, steps INTEGER[], "
                "supports VARCHAR, attributed_saving_ns BIGINT, saving_basis VARCHAR",
}


# --- reading the dataset --------------------------------------------------------------------------------------

def load_manifest(root: Path) -> dict[str, Any]:
    """The manifest of the fleet dataset at `root`; an InputError (one line) when `root` is not one."""
    return read_manifest(root, must_exist=True)


def _entries(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in manifest.get("traces") or [] if isinstance(e, dict) and isinstance(e.get("trace"), str)]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def connect(root: Path, ok: list[str]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with one view per table the report reads, over the partitions of the traces `ok`."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TEMP TABLE fleet_ok (trace VARCHAR)")
    if ok:
        con.executemany("INSERT INTO fleet_ok VALUES (?)", [(t,) for t in ok])
    for table, columns in _EMPTY.items():
        if any((root / table).glob("trace=*/*.parquet")):
            glob = _quote(str(root / table / "*" / "*.parquet"))
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet({glob}, hive_partitioning = true, "
                        "union_by_name = true, hive_types = {'trace': VARCHAR}) "
                        "WHERE trace IN (SELECT trace FROM fleet_ok)")
        else:
            con.execute(f"CREATE TEMP TABLE {table} ({columns})")
    return con


def _rows(con: duckdb.DuckDBPyConnection, name: str, **params: Any) -> list[dict[str, Any]]:
    cur = con.execute(sql(name), params)
    cols = [d[0] for d in cur.description or []]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def build(root: Path, top: int = TOP) -> dict[str, Any]:
    """The fleet report of the dataset at `root` (see the module docstring), `top` worst steps."""
    import duckdb

    from traceinsight.report.fleet import fleet_findings

    manifest = load_manifest(root)
    entries = _entries(manifest)
    ok = [e["trace"] for e in entries if e.get("status") == "ok"]
    # A trace counts with its summary row, and with it all its rows: without one (its files removed since), none.
    present = [k for k in ok if (root / "summary" / f"trace={k}" / "part-0.parquet").is_file()]
    try:
        con = connect(root, present)
        try:
            traces = _rows(con, "fleet_traces")
            rules = _rows(con, "fleet_root_causes")
            worst = _rows(con, "fleet_worst_steps", top=int(top))
        finally:
            con.close()
    except duckdb.Error as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise InputError(f"{root}: cannot read the dataset's tables ({type(exc).__name__}: {first})") from None

    by_key = {e["trace"]: e for e in entries}
    for t in traces:
        t["report"] = _reports(by_key.get(t["trace"], {}))
    for w in worst:
        w["report"] = _step_link(by_key.get(w["trace"], {}))
    seen = set(present)
    failed = [{"trace": e["trace"], "source": e.get("source"), "status": e.get("status") or "pending",
               "error": e.get("error"), "seconds": e.get("seconds")}
              for e in entries if e.get("status") != "ok"]
    failed += [{"trace": key, "source": by_key[key].get("source"), "status": "missing",
                "error": "recorded as analyzed, but its summary file is missing (run fleet analyze again)",
                "seconds": by_key[key].get("seconds")} for key in ok if key not in seen]
    outliers = fleet_findings([dict(t) for t in traces])
    return {
        "schema": SCHEMA,
        "tool": {"name": "traceinsight", "version": __version__},
        "dataset": {"path": str(root), "schema": manifest.get("schema"), "updated": manifest.get("updated"),
                    "versions": manifest.get("versions") or {}},
        "units": {"*_ns": "nanoseconds", "share*": "fraction 0..1", "ratio": "times the trace's median step",
                  "links": "paths relative to the dataset folder"},
        "overview": _overview(entries, traces, failed),
        "root_causes": [r for r in rules if r["traces"]],
        "evidence_only": [{"rule_id": r["rule_id"], "severity": r["severity"], "traces": r["evidence_traces"]}
                          for r in rules if not r["traces"]],
        "traces": traces,
        "worst_steps": worst,
        "outliers": outliers,
        "failed": failed,
    }


def _overview(entries: list[dict[str, Any]], traces: list[dict[str, Any]],
              failed: list[dict[str, Any]]) -> dict[str, Any]:
    status = Counter(e.get("status") or "pending" for e in entries)
    gpus = Counter(t.get("gpu") or "unknown GPU" for t in traces)
    out: dict[str, Any] = {
        "traces": len(entries),
        "ok": len(traces),
        "error": status.get("error", 0),
        "pending": status.get("pending", 0),
        "missing": sum(1 for f in failed if f["status"] == "missing"),
        "gpus": [{"name": name, "traces": n} for name, n in sorted(gpus.items(), key=lambda x: (-x[1], x[0]))],
        "steps": sum(int(t.get("steps") or 0) for t in traces),
    }
    for key in ("steps_wall_ns", "between_steps_ns", "lost_ns", "lost_steps_ns", "lost_between_ns"):
        out[key] = sum(int(t.get(key) or 0) for t in traces)
    return out


def _reports(entry: dict[str, Any]) -> dict[str, str]:
    """The trace's own reports, relative to the dataset folder ({} when none was written)."""
    reports = entry.get("reports") or {}
    return {fmt: rel for fmt, rel in reports.items() if isinstance(rel, str) and fmt in ("html", "json")}


def _step_link(entry: dict[str, Any]) -> str | None:
    reports = _reports(entry)
    if "html" in reports:
        return f"{reports['html']}#{STEP_ANCHOR}"
    return reports.get("json")


def trace_link(t: dict[str, Any]) -> str | None:
    """The link to a trace's own report: its HTML, else its JSON (relative to the dataset folder)."""
    rep = t.get("report") or {}
    link = rep.get("html") or rep.get("json")
    return str(link) if link else None


def href(base: str, rel: str) -> str:
    """A link to `rel` (relative to the dataset folder) from a page whose folder reaches the dataset by `base`
    ('' when the page lies in the dataset folder), URL-quoted (the anchor kept)."""
    path, _, anchor = rel.partition("#")
    url = urllib.parse.quote(f"{base}{path}" if base else path)
    return f"{url}#{anchor}" if anchor else url


def link_base(root: Path, page_dir: Path) -> str:
    """How a page in `page_dir` reaches the dataset folder `root`: '' or 'relative/path/'."""
    rel = os.path.relpath(root.resolve(), page_dir.resolve())
    return "" if rel == "." else rel.replace(os.sep, "/") + "/"
