-- Attention launches whose SMs sat idle for a large share of the kernel: the candidates of sm-idle. A launch's
-- idle fraction is Nsight Compute's (1 - avg/max of sm__cycles_active) when its CSV was matched to it, else the
-- schedule model's simulated one; it counts from $idle_min, for launches of at least $min_ns.
-- Parameters: $idle_min (0..1); $min_ns (ns).
-- Inputs: attention_launches (diagnose/launch_table.py).
-- Columns: pos (the launch's position in attention_launches); name_id (its kernel's
--          name, numbered in the order the names first appear); sm_idle (0..1); source ('ncu' | 'model').
-- Order: name_id (per kernel name, in the order the names first appear), then pos.
WITH named AS (
    SELECT pos, name_id, dur_ns,
           coalesce(sm_idle_measured, sm_idle_model) AS sm_idle,
           CASE WHEN sm_idle_measured IS NOT NULL THEN 'ncu' ELSE 'model' END AS source
    FROM attention_launches
)
SELECT pos, name_id, sm_idle, source
FROM named
WHERE sm_idle >= $idle_min AND dur_ns >= $min_ns
ORDER BY name_id, pos
