-- The GPU that ran most of trace $trace's kernel time, with its properties (NULL where the trace has none).
-- Kernels on a device id that no devices row describes take the properties of the trace's devices rows when they
-- all describe one GPU model (same name, SM count, compute capability and memory): TraceLens' SGLang MI300X trace
-- runs its kernels on device 9 with deviceProperties under id 0 only; a node's eight identical GPUs listed as 0..7
-- serve kernels on any other id alike. The device_id stays the kernels' own. The name is the trace's, empty or not:
-- the model (model/gpus.py) identifies an unnamed GPU from these properties.
-- Columns: device_id; name; num_sms; compute_major; compute_minor; regs_per_sm; smem_per_sm_bytes;
--          max_threads_per_sm; max_blocks_per_sm; kernel_ns (kernel time on it, ns).
WITH used AS (
    SELECT device_id, sum(dur_ns) AS kernel_ns FROM kernels WHERE trace_id = $trace GROUP BY device_id
), devs AS (
    SELECT * FROM devices WHERE trace_id = $trace
), props AS (
    SELECT u.device_id, u.kernel_ns,
           CASE WHEN u.device_id IS NULL OR u.device_id IN (SELECT device_id FROM devs) THEN u.device_id
                WHEN (SELECT count(DISTINCT (name, num_sms, compute_major, compute_minor, total_mem_bytes)) FROM devs) = 1
                THEN (SELECT min(device_id) FROM devs)
           END AS props_id
    FROM used u
)
SELECT coalesce(u.device_id, d.device_id) AS device_id, d.name, d.num_sms, d.compute_major, d.compute_minor,
       d.regs_per_sm, d.smem_per_sm_bytes, d.max_threads_per_sm, d.max_blocks_per_sm, u.kernel_ns
FROM props u FULL OUTER JOIN devs d ON d.device_id = u.props_id
ORDER BY u.kernel_ns DESC NULLS LAST, d.device_id
LIMIT 1
