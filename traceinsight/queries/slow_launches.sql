-- Attention launches slow against their balanced reference: the candidates of split-kv-off (split state off),
-- split-kv-starved (on) and, by durations, tail-ctas (any state, simulated launches left to the simulation).
-- A launch's reference is the schedule model's time for the same work at full-GPU throughput scaled by
-- measured / predicted ('model': balanced_ns x dur_ns / predicted_ns, when both are known and non-zero), else
-- its family's typical time (kernel_baselines). It is slow when it takes at least $ratio_min times and
-- $excess_min ns more than the reference, and at least $ratio_min times its family's typical time (two
-- independent estimates must agree).
-- Parameters: $backends (list of backends, NULL: every launch); $split_kv (TRUE / FALSE: only launches in that
--             split state; NULL: any state, unknown included); $unsimulated (TRUE: only launches without a
--             simulated schedule); $ratio_min; $excess_min (ns).
-- Inputs: attention_launches (diagnose/launch_table.py), kernel_baselines (kernel_baselines.sql).
-- Columns: pos (the launch's position in attention_launches); name_id (its kernel's
--          name, numbered in the order the names first appear); reference_ns; reference ('model' or the
--          typical_source); typical_ns; ratio (dur_ns / reference_ns, 0 without a reference); excess_ns
--          (dur_ns - reference_ns, at least 0).
-- Order: name_id (per kernel name, in the order the names first appear), then pos.
WITH priced AS (
    SELECT l.pos, l.name_id, l.dur_ns, b.typical_ns,
           CASE WHEN l.balanced_ns <> 0 AND l.predicted_ns <> 0 THEN l.balanced_ns * l.dur_ns / l.predicted_ns
                ELSE b.typical_ns END AS reference_ns,
           CASE WHEN l.balanced_ns <> 0 AND l.predicted_ns <> 0 THEN 'model' ELSE b.typical_source END AS reference
    FROM attention_launches l JOIN kernel_baselines b USING (family_id)
    WHERE ($backends IS NULL OR list_contains($backends, l.backend))
      AND ($split_kv IS NULL OR l.split_kv = $split_kv)
      AND NOT ($unsimulated AND l.simulated)
      AND l.dur_ns >= $ratio_min * b.typical_ns
), judged AS (
    SELECT *, CASE WHEN reference_ns > 0 THEN dur_ns / reference_ns ELSE 0.0::DOUBLE END AS ratio,
           greatest(0.0::DOUBLE, dur_ns - reference_ns) AS excess_ns
    FROM priced
)
SELECT pos, name_id, reference_ns, reference, typical_ns, ratio, excess_ns
FROM judged
WHERE ratio >= $ratio_min AND excess_ns >= $excess_min
ORDER BY name_id, pos
