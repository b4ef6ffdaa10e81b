-- The GPU that ran most of trace $trace's kernel time, with its properties (NULL where the trace has none).
-- Columns: device_id; name; num_sms; compute_major; compute_minor; regs_per_sm; smem_per_sm_bytes;
--          max_threads_per_sm; max_blocks_per_sm; kernel_ns (kernel time on it, ns).
WITH used AS (
    SELECT device_id, sum(dur_ns) AS kernel_ns FROM kernels WHERE trace_id = $trace GROUP BY device_id
)
SELECT coalesce(u.device_id, d.device_id) AS device_id, d.name, d.num_sms, d.compute_major, d.compute_minor,
       d.regs_per_sm, d.smem_per_sm_bytes, d.max_threads_per_sm, d.max_blocks_per_sm, u.kernel_ns
FROM used u FULL OUTER JOIN (SELECT * FROM devices WHERE trace_id = $trace) d ON d.device_id = u.device_id
ORDER BY u.kernel_ns DESC NULLS LAST, d.device_id
LIMIT 1
