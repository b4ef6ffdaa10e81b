-- The $top slowest steps of a fleet dataset (traceinsight/fleet/report.py), by the GPU span of each step's
-- kernels. Inputs: `steps` (one row per step), `summary` (one row per trace: step_p50_ns) and `findings` (steps:
-- the step indices each finding names), all keyed by the partition column `trace`.
-- Columns: trace; step (index in its trace); name; dur_ns (GPU span of its kernels); wall_ns (what the engine
--          waited for it, NULL when unknown); split_kv (NULL: unknown); median_ns (the trace's median step,
--          summary.step_p50_ns); ratio (dur_ns / median_ns, NULL without a median); findings (rule ids of the
--          findings, root causes or evidence, that name this step, in report order; [] when none).
-- Order: slowest first; ties by trace, then step.
WITH top AS (
    SELECT st.trace, st.step, st.name, st.dur_ns, st.wall_ns, st.split_kv, s.step_p50_ns AS median_ns
    FROM steps st
    JOIN summary s USING (trace)
    ORDER BY st.dur_ns DESC, st.trace, st.step
    LIMIT $top
), named AS (
    SELECT trace, step, rule_id, min(finding) AS first
    FROM (SELECT trace, rule_id, finding, unnest(steps) AS step
          FROM findings WHERE trace IN (SELECT trace FROM top))
    GROUP BY trace, step, rule_id
)
SELECT t.trace, t.step, t.name, t.dur_ns, t.wall_ns, t.split_kv, t.median_ns,
       t.dur_ns / nullif(t.median_ns, 0) AS ratio,
       coalesce(list(n.rule_id ORDER BY n.first, n.rule_id) FILTER (WHERE n.rule_id IS NOT NULL), []) AS findings
FROM top t
LEFT JOIN named n ON n.trace = t.trace AND n.step = t.step
GROUP BY ALL
ORDER BY t.dur_ns DESC, t.trace, t.step
