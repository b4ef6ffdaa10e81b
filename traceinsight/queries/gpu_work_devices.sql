-- The devices trace $trace's GPU work (kernels and memory operations) ran on, as queries/gpu_work_ordered.sql
-- orders them: -1 (not known) first, then by id.
-- Columns: device_id (-1 where not known).
SELECT DISTINCT coalesce(device_id, -1) AS device_id FROM kernels WHERE trace_id = $trace
UNION
SELECT DISTINCT coalesce(device_id, -1) FROM memops WHERE trace_id = $trace
ORDER BY device_id
