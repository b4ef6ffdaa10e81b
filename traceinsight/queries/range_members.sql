-- Every kernel of trace $trace that belongs to one of the ranges in $range_ids: for a CPU range, kernels whose
-- launch call started inside it on the same thread; for a GPU range, kernels that ran inside it on its device.
-- Columns: range_id; kernel_id.
WITH chosen AS (
    SELECT * FROM ranges WHERE trace_id = $trace AND list_contains($range_ids, range_id)
), k AS (
    SELECT k.kernel_id, k.start_ns, k.end_ns, k.device_id, l.start_ns AS launch_ns, l.thread_id, l.process_id
    FROM kernels k
    LEFT JOIN launches l ON l.trace_id = k.trace_id AND l.correlation_id = k.correlation_id
     AND (k.process_id IS NULL OR l.process_id IS NULL OR l.process_id = k.process_id)
    WHERE k.trace_id = $trace
)
SELECT r.range_id, k.kernel_id
FROM chosen r JOIN k
  ON r.side = 'cpu' AND k.launch_ns IS NOT NULL
 AND r.start_ns <= k.launch_ns AND k.launch_ns <= r.end_ns
 AND (r.thread_id IS NULL OR k.thread_id IS NULL OR r.thread_id = k.thread_id)
 AND (r.process_id IS NULL OR k.process_id IS NULL OR r.process_id = k.process_id)
UNION ALL
SELECT r.range_id, k.kernel_id
FROM chosen r JOIN k
  ON r.side = 'gpu'
 AND r.start_ns <= k.start_ns AND k.end_ns <= r.end_ns
 AND (r.device_id IS NULL OR k.device_id IS NULL OR r.device_id = k.device_id)
