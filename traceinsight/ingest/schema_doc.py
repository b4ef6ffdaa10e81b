"""Render docs/SCHEMA.md from the comments of schema.sql (the single source of truth).

`python -m traceinsight.ingest.schema_doc > docs/SCHEMA.md` regenerates it; a test keeps the two in step."""

from __future__ import annotations

import re

from traceinsight.ingest.schema import schema_sql

_TABLE = re.compile(r"^CREATE (?:TABLE|VIEW) IF NOT EXISTS (\w+) \($")
_COLUMN = re.compile(r"^\s+(\w+)\s+([A-Z]+(?:\[\])?)(?: NOT NULL)?,?\s*(?:--\s*(.*))?$")
# A view's column: its name in the view's column list, its type in the comment ('-- TYPE[ NOT NULL][: meaning]'),
# as DuckDB gives it (a test compares them).
_VIEW_COLUMN = re.compile(r"^\s+(\w+),?\s+--\s*([A-Z]+(?:\[\])?)(?: NOT NULL)?(?::\s*(.*))?$")

INTRO = """# Normalized schema

Every reader (Kineto JSON, Nsight Systems SQLite / .nsys-rep, Nsight Compute CSV, sidecars) fills these
DuckDB tables. Times are int64 nanoseconds on the trace's own clock (`*_ns`), sizes are bytes (`*_bytes`);
every table has `trace_id`, so many traces can share one database or one Parquet dataset. A column a format
cannot provide is NULL. `traceinsight sql TRACE [--meta SIDECAR] [--ncu CSV] "select ..."` queries them (a sidecar's
batches and Nsight Compute's metrics attached as `analyze` attaches them); `kernel_labels` (one row per
distinct kernel name, added by the labels stage) joins on `kernels.name`. `kernels` is a view of `kernel_rows`, which
holds each kernel's names as an id into `kernel_names` (a name once per trace, not once per kernel).

The analysis itself is in tables too (`steps`, `step_breakdown`, `attention_launches`, `launch_models`,
`findings`, `rule_checks`, `analyses`, at the end): `traceinsight sql` fills them when a query names them,
`traceinsight analyze TRACE --save DIR` and `traceinsight export --parquet DIR --analysis` write them out, and
`traceinsight report DIR` renders a trace's reports from them alone (they hold everything the reports show).

Generated from `traceinsight/ingest/schema.sql` by `python -m traceinsight.ingest.schema_doc`.
"""


# Meanings of columns that recur across tables, used where schema.sql has no comment on the line.
_DEFAULTS = {
    "trace_id": "the trace this row belongs to (`traces.trace_id`)",
    "max_threads_per_sm": "resident threads per SM",
    "max_threads_per_block": "threads one block may have",
    "max_blocks_per_sm": "resident blocks per SM",
    "max_warps_per_sm": "resident warps per SM",
    "warp_size": "threads per warp",
    "l2_bytes": "L2 cache size",
    "process_id": "OS process id",
    "thread_id": "OS thread id",
    "name": "name as the tool prints it",
    "device_id": "CUDA device ordinal",
    "stream_id": "CUDA stream",
    "bytes": "bytes copied or set",
    "correlation_id": "links GPU work to the API call that launched it (`launches.correlation_id`)",
    "grid_x": "grid size in CTAs along x",
    "grid_y": "grid size along y",
    "grid_z": "grid size along z",
    "block_x": "threads per block along x",
    "block_y": "threads per block along y",
    "block_z": "threads per block along z",
    "ncu_id": "the CSV's ID column (`ncu_kernels.ncu_id`)",
    "batch_size": "requests in the step",
    "qo_heads": "query/output heads (H_q) on this GPU",
    "kv_heads": "KV heads (H_kv) on this GPU",
    "head_dim": "head dimension D",
    "page_size": "KV-cache page size in tokens",
    "kv_dtype": "KV-cache dtype ('bfloat16', 'float8_e4m3fn', ...)",
    "cuda_graph": "the step ran under CUDA graph replay",
    "planned_split_kv": "the planner split long requests along KV",
    "planned_chunk_tokens": "the planner's KV chunk size in tokens",
}


def markdown() -> str:
    out = [INTRO]
    pending: list[str] = []
    for line in schema_sql().splitlines():
        if line.startswith("-- ") and not line.startswith("-- The normalized") and "docs/SCHEMA.md" not in line:
            pending.append(line[3:])
            continue
        m = _TABLE.match(line)
        if m:
            out.append(f"\n## `{m[1]}`\n\n{' '.join(pending)}\n\n| column | type | meaning |\n|---|---|---|")
            pending = []
            continue
        c = _COLUMN.match(line) or _VIEW_COLUMN.match(line)
        if c:
            meaning = (c[3] or "").strip() or _DEFAULTS.get(c[1], "")
            out.append(f"| `{c[1]}` | {c[2]} | {meaning.replace('|', chr(92) + '|')} |")
        elif not line.strip():
            pending = []
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(markdown(), end="")
