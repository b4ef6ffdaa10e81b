-- Every memory operation (copy, set) trace $trace ran, for the step breakdown (model/gpu_work.py): GPU work of
-- the family 'memory'.
-- Columns: device_id; start_ns, end_ns (on the GPU, ns); correlation_id (NULL where the trace does not say).
SELECT device_id, start_ns, end_ns, correlation_id
FROM memops
WHERE trace_id = $trace
