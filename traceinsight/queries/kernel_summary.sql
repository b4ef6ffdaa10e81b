-- Per distinct kernel name of trace $trace: how often it ran and for how long, with its label.
-- Columns: name; kernel (short name); family; backend; phase; phase_evidence; params_json; count;
--          total_ns, mean_ns, min_ns, max_ns (ns); share (of all kernel time in the trace, 0..1);
--          grids (distinct [x, y, z] grids seen, at most 8: most launches first, then by x, y, z, null last).
WITH t AS (SELECT sum(dur_ns) AS all_ns FROM kernels WHERE trace_id = $trace),
per_grid AS (
    SELECT name, grid_x, grid_y, grid_z, count(*) AS launches
    FROM kernels WHERE trace_id = $trace
    GROUP BY ALL
),
g AS (
    SELECT name,
           list([grid_x, grid_y, grid_z]
                ORDER BY launches DESC, grid_x NULLS LAST, grid_y NULLS LAST, grid_z NULLS LAST)[1:8] AS grids
    FROM per_grid
    GROUP BY name
)
SELECT k.name, kl.kernel, kl.family, kl.backend, kl.phase, kl.phase_evidence, kl.params_json,
       count(*) AS count, sum(k.dur_ns) AS total_ns, CAST(round(avg(k.dur_ns)) AS BIGINT) AS mean_ns,
       min(k.dur_ns) AS min_ns, max(k.dur_ns) AS max_ns,
       sum(k.dur_ns) / nullif(any_value(t.all_ns), 0) AS share,
       any_value(g.grids) AS grids
FROM kernels k JOIN kernel_labels kl ON kl.name = k.name JOIN g ON g.name = k.name, t
WHERE k.trace_id = $trace
GROUP BY ALL
ORDER BY total_ns DESC, k.name
