-- For each kernel of trace $trace whose family is one of $families, every range that enclosed it:
-- a CPU range (annotation / NVTX / profiler step) on the launching thread that contains the launch call's
-- start, or a GPU-side range (Kineto gpu_user_annotation) on the kernel's device that contains the kernel.
-- Columns: kernel_id; range_id; name (range name); kind; side ('cpu'|'gpu'); start_ns, end_ns (range, ns);
--          attention_inside (number of $families kernels the range encloses, filled later by the caller).
WITH k AS (
    SELECT k.kernel_id, k.start_ns, k.end_ns, k.device_id, l.start_ns AS launch_ns, l.thread_id, l.process_id
    FROM kernels k
    JOIN kernel_labels kl ON kl.name = k.name
    LEFT JOIN launches l ON l.trace_id = k.trace_id AND l.correlation_id = k.correlation_id
     AND (k.process_id IS NULL OR l.process_id IS NULL OR l.process_id = k.process_id)
    WHERE k.trace_id = $trace AND list_contains($families, kl.family)
)
SELECT k.kernel_id, r.range_id, r.name, r.kind, r.side, r.start_ns, r.end_ns
FROM k
JOIN ranges r
  ON r.trace_id = $trace
 AND r.side = 'cpu'
 AND k.launch_ns IS NOT NULL
 AND r.start_ns <= k.launch_ns AND k.launch_ns <= r.end_ns
 AND (r.thread_id IS NULL OR k.thread_id IS NULL OR r.thread_id = k.thread_id)
 AND (r.process_id IS NULL OR k.process_id IS NULL OR r.process_id = k.process_id)
UNION ALL
SELECT k.kernel_id, r.range_id, r.name, r.kind, r.side, r.start_ns, r.end_ns
FROM k
JOIN ranges r
  ON r.trace_id = $trace
 AND r.side = 'gpu'
 AND r.start_ns <= k.start_ns AND k.end_ns <= r.end_ns
 AND (r.device_id IS NULL OR k.device_id IS NULL OR r.device_id = k.device_id)
