-- The launch calls (runtime/driver API calls on the host) of trace $trace whose correlation id lies in [$lo, $hi],
-- for the GPU work of one record batch of queries/gpu_work_ordered.sql (model/launch_calls.py matches them).
-- Columns: correlation_id; process_id (NULL where the trace does not say); start_ns (on the host, ns).
SELECT correlation_id, process_id, start_ns
FROM launches
WHERE trace_id = $trace AND correlation_id BETWEEN $lo AND $hi
