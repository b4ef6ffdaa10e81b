-- One row per analyzed trace of a fleet dataset (traceinsight/fleet/report.py): its summary figures and what its
-- root causes cost. Inputs: `summary` (one row per trace) and `findings` (one row per finding), the dataset's
-- tables keyed by the partition column `trace`. A root cause is a finding with supports IS NULL; its
-- attributed_saving_ns is bounded step by step by the time it comes from: the steps' wall time (saving_basis
-- 'steps') or the time between steps ('span'), so a trace's losses never add up to more than its time.
-- Columns: trace; gpu; steps; step_p50_ns, step_p99_ns, step_max_ns (GPU span of a step's kernels);
--          split_kv_off_share (0..1); critical, warning_findings, infos (findings by severity); steps_wall_ns,
--          between_steps_ns (the budgets, ns); lost_ns = lost_steps_ns + lost_between_ns (ns);
--          root_causes (list of {rule_id, lost_ns}, largest loss first, then report order).
-- Order: largest loss first, then trace.
WITH rc AS (
    SELECT trace, rule_id,
           sum(coalesce(attributed_saving_ns, 0)) AS lost_ns,
           sum(coalesce(attributed_saving_ns, 0)) FILTER (WHERE saving_basis = 'span') AS lost_between_ns,
           min(finding) AS first
    FROM findings
    WHERE supports IS NULL
    GROUP BY trace, rule_id
), per AS (
    SELECT trace,
           list({'rule_id': rule_id, 'lost_ns': lost_ns} ORDER BY lost_ns DESC, first, rule_id) AS root_causes,
           sum(lost_ns)::BIGINT AS lost_ns,
           coalesce(sum(lost_between_ns), 0)::BIGINT AS lost_between_ns
    FROM rc
    GROUP BY trace
)
SELECT s.trace, s.gpu, s.steps, s.step_p50_ns, s.step_p99_ns, s.step_max_ns, s.split_kv_off_share,
       s.critical, s.warning_findings, s.infos,
       coalesce(s.steps_wall_ns, 0) AS steps_wall_ns, coalesce(s.between_steps_ns, 0) AS between_steps_ns,
       coalesce(p.lost_ns, 0) AS lost_ns,
       coalesce(p.lost_ns - p.lost_between_ns, 0) AS lost_steps_ns,
       coalesce(p.lost_between_ns, 0) AS lost_between_ns,
       coalesce(p.root_causes, []) AS root_causes
FROM summary s
LEFT JOIN per p USING (trace)
ORDER BY lost_ns DESC, s.trace
