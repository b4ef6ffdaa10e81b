-- Every launch call (runtime/driver API call on the host) of trace $trace, for the step breakdown: each kernel's
-- and memory operation's launch call is found among them on arrays (model/launch_calls.py).
-- Columns: correlation_id; process_id (NULL where the trace does not say); start_ns (on the host, ns).
SELECT correlation_id, process_id, start_ns
FROM launches
WHERE trace_id = $trace
