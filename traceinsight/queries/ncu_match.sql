-- Which trace kernel of trace $trace each of its Nsight Compute kernels measured: sets ncu_kernels.kernel_id.
-- A key is the kernel's name key (below), its grid and block when $dims (the export has them; details pages of ncu
-- before 2023 lack "Grid Size"), and when $nvtx (ncu rows carry NVTX text and the trace has CPU ranges of kind
-- 'nvtx'/'annotation') the NVTX text: for an ncu kernel its innermost range; for a trace kernel its innermost
-- enclosing range, the latest-starting CPU range (on the launching thread when both threads are known) whose
-- [start, end] holds the kernel's launch (launches.start_ns via correlation id, else the kernel's start). The
-- texts must be equal; failing that, a trace range whose name holds every token of an ncu text ("decode tc=0
-- dist=uniform bs=32 step=0" for "tc=0 dist=uniform bs=32", as sidecar.key_matches) counts as that text, the ncu
-- text with the most tokens winning. The k-th ncu kernel of a key (in ncu ID order) is matched to the k-th trace
-- kernel of that key (in start order).
-- The name key is what ncu, nsys and Kineto agree on: nsys prints `flashinfer::K<(unsigned int)2, (bool)0>(T9)`,
-- Kineto `flashinfer::K<2u, false>(Params)`, ncu `K<2, 0>(T9)`; the key drops the `void ` return type, C-style
-- casts before numbers, integer suffixes, namespace qualifiers and the parameter list, writes false/true as 0/1 and
-- removes whitespace: `K<2,0>` for all three. It is computed once per distinct name.
-- Inputs: kernels, launches, ranges, ncu_kernels; $trace.
-- Writes: ncu_kernels.kernel_id (run `UPDATE ... SET kernel_id = NULL` first for a rerun).
-- Columns: none (an UPDATE; it returns no rows).
WITH flags AS (
    SELECT (SELECT count(*) FROM ncu_kernels WHERE trace_id = $trace AND nvtx IS NOT NULL) > 0
           AND (SELECT count(*) FROM ranges
                WHERE trace_id = $trace AND side = 'cpu' AND kind IN ('nvtx', 'annotation')) > 0 AS nvtx,
           (SELECT count(*) FROM ncu_kernels WHERE trace_id = $trace AND grid_x IS NOT NULL) > 0 AS dims
),
names AS (
    SELECT name FROM kernels WHERE trace_id = $trace
    UNION
    SELECT name FROM ncu_kernels WHERE trace_id = $trace
),
name_keys AS (
    SELECT name,
           regexp_replace(
           regexp_replace(
           regexp_replace(
           regexp_replace(
           regexp_replace(
           regexp_replace(
           regexp_replace(
           regexp_replace(
           regexp_replace(name, '^void\s+', ''),
                          '\((?:[A-Za-z_][A-Za-z0-9_:]*\s*)+\)\s*(-?[0-9])', '\1', 'g'),
                          '\b([0-9]+)(?:[uU][lL]{0,2}|[lL]{1,2}[uU]?)\b', '\1', 'g'),
                          '\bfalse\b', '0', 'g'),
                          '\btrue\b', '1', 'g'),
                          '(?:<unnamed>|\(anonymous namespace\))::', '', 'g'),
                          '[A-Za-z_][A-Za-z0-9_]*::', '', 'g'),
                          '\([^()]*\)\s*$', ''),
                          '\s+', '', 'g') AS nk
    FROM names
),
launch AS (
    SELECT k.kernel_id, k.name, k.start_ns, k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z,
           coalesce(l.start_ns, k.start_ns) AS launch_ns, l.thread_id
    FROM kernels k
    LEFT JOIN (SELECT correlation_id, any_value(start_ns) AS start_ns, any_value(thread_id) AS thread_id
               FROM launches WHERE trace_id = $trace GROUP BY correlation_id) l
      ON l.correlation_id = k.correlation_id
    WHERE k.trace_id = $trace
),
enclosing AS (
    SELECT a.kernel_id, arg_max(r.name, struct_pack(s := r.start_ns, e := -r.end_ns)) AS nvtx
    FROM launch a
    JOIN ranges r
      ON r.trace_id = $trace AND r.side = 'cpu' AND r.kind IN ('nvtx', 'annotation')
     AND r.start_ns <= a.launch_ns AND a.launch_ns <= r.end_ns
     AND (r.thread_id IS NULL OR a.thread_id IS NULL OR r.thread_id = a.thread_id)
    WHERE (SELECT nvtx FROM flags)
    GROUP BY a.kernel_id
),
ncu_texts AS (
    SELECT DISTINCT nvtx AS txt,
           list_filter(regexp_split_to_array(nvtx, '\s+'), lambda x: x <> '') AS toks
    FROM ncu_kernels WHERE trace_id = $trace AND nvtx IS NOT NULL
),
range_names AS (
    SELECT DISTINCT nvtx, list_filter(regexp_split_to_array(nvtx, '\s+'), lambda x: x <> '') AS toks FROM enclosing
),
name_map AS (  -- each enclosing range name -> the ncu NVTX text it stands for (per name, not per kernel)
    SELECT g.nvtx,
           coalesce(arg_max(c.txt, struct_pack(same := c.txt = g.nvtx,
                                               ntok := len(regexp_split_to_array(trim(c.txt), '\s+')),
                                               txt := c.txt)),
                    g.nvtx) AS label
    FROM range_names g
    LEFT JOIN ncu_texts c ON c.txt = g.nvtx OR (len(c.toks) > 0 AND list_has_all(g.toks, c.toks))
    GROUP BY g.nvtx
),
labelled AS (
    SELECT e.kernel_id, m.label AS nvtx FROM enclosing e JOIN name_map m USING (nvtx)
),
trace_side AS (
    SELECT a.kernel_id, nk.nk,
           CASE WHEN f.dims THEN a.grid_x END AS g1, CASE WHEN f.dims THEN a.grid_y END AS g2,
           CASE WHEN f.dims THEN a.grid_z END AS g3, CASE WHEN f.dims THEN a.block_x END AS b1,
           CASE WHEN f.dims THEN a.block_y END AS b2, CASE WHEN f.dims THEN a.block_z END AS b3,
           CASE WHEN f.nvtx THEN e.nvtx END AS nv, a.start_ns
    FROM launch a JOIN name_keys nk USING (name) LEFT JOIN labelled e USING (kernel_id), flags f
),
trace_ranked AS (
    SELECT *, row_number() OVER (PARTITION BY nk, g1, g2, g3, b1, b2, b3, nv ORDER BY start_ns, kernel_id) AS k
    FROM trace_side
),
ncu_side AS (
    SELECT n.ncu_id, nk.nk,
           CASE WHEN f.dims THEN n.grid_x END AS g1, CASE WHEN f.dims THEN n.grid_y END AS g2,
           CASE WHEN f.dims THEN n.grid_z END AS g3, CASE WHEN f.dims THEN n.block_x END AS b1,
           CASE WHEN f.dims THEN n.block_y END AS b2, CASE WHEN f.dims THEN n.block_z END AS b3,
           CASE WHEN f.nvtx THEN n.nvtx END AS nv
    FROM ncu_kernels n JOIN name_keys nk USING (name), flags f
    WHERE n.trace_id = $trace
),
ncu_ranked AS (
    SELECT *, row_number() OVER (PARTITION BY nk, g1, g2, g3, b1, b2, b3, nv ORDER BY ncu_id) AS k FROM ncu_side
),
pairs AS (
    SELECT c.ncu_id, t.kernel_id
    FROM ncu_ranked c JOIN trace_ranked t
      ON c.nk = t.nk AND c.k = t.k
     AND c.g1 IS NOT DISTINCT FROM t.g1 AND c.g2 IS NOT DISTINCT FROM t.g2 AND c.g3 IS NOT DISTINCT FROM t.g3
     AND c.b1 IS NOT DISTINCT FROM t.b1 AND c.b2 IS NOT DISTINCT FROM t.b2 AND c.b3 IS NOT DISTINCT FROM t.b3
     AND c.nv IS NOT DISTINCT FROM t.nv
)
UPDATE ncu_kernels SET kernel_id = pairs.kernel_id
FROM pairs
WHERE ncu_kernels.trace_id = $trace AND ncu_kernels.ncu_id = pairs.ncu_id
