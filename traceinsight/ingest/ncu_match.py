"""Which trace kernel each Nsight Compute kernel measured: same kernel (a name key ncu, nsys and Kineto agree on),
grid, block, NVTX range and order."""

from __future__ import annotations

from traceinsight.ingest.sidecar import key_matches_sql
from traceinsight.ingest.store import TraceDB


def name_key_sql(column: str) -> str:
    """A DuckDB expression turning a demangled kernel name into a key that ncu, nsys and Kineto agree on.

    The three tools print the same kernel differently: nsys `flashinfer::K<(unsigned int)2, (bool)0>(T9)`,
    Kineto `flashinfer::K<2u, false>(Params)`, ncu `K<2, 0>(T9)`. The key drops the `void ` return type, C-style
    casts before numbers, integer suffixes (`2u`), namespace qualifiers and the parameter list, writes
    `false`/`true` as 0/1 and removes whitespace: `K<2,0>` for all three.
    """
    e = column
    e = rf"regexp_replace({e}, '^void\s+', '')"
    e = rf"regexp_replace({e}, '\((?:[A-Za-z_][A-Za-z0-9_:]*\s*)+\)\s*(-?[0-9])', '\1', 'g')"
    e = rf"regexp_replace({e}, '\b([0-9]+)(?:[uU][lL]{{0,2}}|[lL]{{1,2}}[uU]?)\b', '\1', 'g')"
    e = rf"regexp_replace({e}, '\bfalse\b', '0', 'g')"
    e = rf"regexp_replace({e}, '\btrue\b', '1', 'g')"
    e = rf"regexp_replace({e}, '(?:<unnamed>|\(anonymous namespace\))::', '', 'g')"
    e = rf"regexp_replace({e}, '[A-Za-z_][A-Za-z0-9_]*::', '', 'g')"
    e = rf"regexp_replace({e}, '\([^()]*\)\s*$', '')"
    return rf"regexp_replace({e}, '\s+', '', 'g')"


_RANGE_KINDS = ("nvtx", "annotation")


def match(db: TraceDB, trace_id: int) -> int:
    """Set `ncu_kernels.kernel_id` for the ncu rows attached to `trace_id`; return how many were matched.

    A key is (kernel name as `name_key_sql`, grid, block; grid and block only when the export has them) plus, when
    the ncu rows carry NVTX text and the trace has CPU ranges of kind 'nvtx'/'annotation', the NVTX text: for an ncu
    kernel its innermost range, for a trace kernel its innermost enclosing range, the latest-starting CPU range (on
    the launching thread when both threads are known) whose [start, end] contains the kernel's launch
    (`launches.start_ns` via correlation id, else the kernel's start). The texts must be equal; failing that, a
    trace range whose name holds every token of an ncu text (`sidecar.key_matches`: "decode tc=0 dist=uniform bs=32
    step=0" for "tc=0 dist=uniform bs=32") counts as that text, the ncu text with the most tokens winning. The k-th
    ncu kernel of a key (in ncu ID order) is matched to the k-th trace kernel of that key (in start order).
    """
    params = {"t": trace_id}
    db.sql("UPDATE ncu_kernels SET kernel_id = NULL WHERE trace_id = $t", params)
    use_nvtx = db.rows(
        "SELECT (SELECT count(*) FROM ncu_kernels WHERE trace_id = $t AND nvtx IS NOT NULL) > 0 "
        f"AND (SELECT count(*) FROM ranges WHERE trace_id = $t AND side = 'cpu' AND kind IN {_RANGE_KINDS}) > 0 "
        "AS use_nvtx",
        params,
    )[0]["use_nvtx"]
    nvtx_ncu = "n.nvtx" if use_nvtx else "NULL"
    nvtx_trace = "e.nvtx" if use_nvtx else "NULL"
    # Launch dimensions take part when the export has them (details pages of ncu before 2023 lack "Grid Size").
    use_dims = db.rows(
        "SELECT count(*) > 0 AS d FROM ncu_kernels WHERE trace_id = $t AND grid_x IS NOT NULL", params
    )[0]["d"]
    dims = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"] if use_dims else []
    part_t = ", ".join(["nk", *dims, "nv"])
    part_n = ", ".join([name_key_sql("n.name"), *(f"n.{d}" for d in dims), nvtx_ncu])
    same_dims = "".join(f" AND c.{d} IS NOT DISTINCT FROM t.{d}" for d in dims)
    db.sql(
        f"""
        WITH launch AS (
            SELECT k.kernel_id, k.name, k.start_ns, k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z,
                   coalesce(l.start_ns, k.start_ns) AS launch_ns, l.thread_id
            FROM kernels k
            LEFT JOIN (SELECT correlation_id, any_value(start_ns) AS start_ns, any_value(thread_id) AS thread_id
                       FROM launches WHERE trace_id = $t GROUP BY correlation_id) l
              ON l.correlation_id = k.correlation_id
            WHERE k.trace_id = $t
        ),
        enclosing AS (
            SELECT a.kernel_id, arg_max(r.name, struct_pack(s := r.start_ns, e := -r.end_ns)) AS nvtx
            FROM launch a
            JOIN ranges r
              ON r.trace_id = $t AND r.side = 'cpu' AND r.kind IN {_RANGE_KINDS}
             AND r.start_ns <= a.launch_ns AND a.launch_ns <= r.end_ns
             AND (r.thread_id IS NULL OR a.thread_id IS NULL OR r.thread_id = a.thread_id)
            WHERE {"true" if use_nvtx else "false"}
            GROUP BY a.kernel_id
        ),
        ncu_texts AS (
            SELECT DISTINCT nvtx AS txt FROM ncu_kernels WHERE trace_id = $t AND nvtx IS NOT NULL
        ),
        range_names AS (SELECT DISTINCT nvtx FROM enclosing),
        name_map AS (  -- each enclosing range name -> the ncu NVTX text it stands for (per name, not per kernel)
            SELECT g.nvtx,
                   coalesce(arg_max(c.txt, struct_pack(same := c.txt = g.nvtx,
                                                       ntok := len(regexp_split_to_array(trim(c.txt), '\\s+')),
                                                       txt := c.txt)),
                            g.nvtx) AS label
            FROM range_names g
            LEFT JOIN ncu_texts c ON c.txt = g.nvtx OR {key_matches_sql("c.txt", "g.nvtx")}
            GROUP BY g.nvtx
        ),
        labelled AS (
            SELECT e.kernel_id, m.label AS nvtx FROM enclosing e JOIN name_map m USING (nvtx)
        ),
        trace_side AS (
            SELECT a.kernel_id, {name_key_sql("a.name")} AS nk, a.grid_x, a.grid_y, a.grid_z,
                   a.block_x, a.block_y, a.block_z, {nvtx_trace} AS nv, a.start_ns
            FROM launch a LEFT JOIN labelled e USING (kernel_id)
        ),
        trace_ranked AS (
            SELECT *, row_number() OVER (PARTITION BY {part_t} ORDER BY start_ns, kernel_id) AS k
            FROM trace_side
        ),
        ncu_ranked AS (
            SELECT n.ncu_id, {name_key_sql("n.name")} AS nk, n.grid_x, n.grid_y, n.grid_z,
                   n.block_x, n.block_y, n.block_z, {nvtx_ncu} AS nv,
                   row_number() OVER (PARTITION BY {part_n} ORDER BY n.ncu_id) AS k
            FROM ncu_kernels n WHERE n.trace_id = $t
        ),
        pairs AS (
            SELECT c.ncu_id, t.kernel_id
            FROM ncu_ranked c JOIN trace_ranked t
              ON c.nk = t.nk AND c.k = t.k{same_dims}
             AND c.nv IS NOT DISTINCT FROM t.nv
        )
        UPDATE ncu_kernels SET kernel_id = pairs.kernel_id
        FROM pairs
        WHERE ncu_kernels.trace_id = $t AND ncu_kernels.ncu_id = pairs.ncu_id
        """,
        params,
    )
    row = db.rows("SELECT count(kernel_id) AS n FROM ncu_kernels WHERE trace_id = $t", params)
    return int(row[0]["n"])
