-- Everything trace $trace ran on its GPUs, for the step breakdown (model/breakdown.py): every kernel and every
-- memory operation with the start of the host API call that launched it, in start order.
-- Columns: kernel_id (NULL for a memory operation); family (kernel_labels.family; 'memory' for a memory
--          operation); device_id; start_ns, end_ns (on the GPU, ns); launch_ns (start of the launching
--          runtime/driver call on the host, ns; NULL when the trace does not link them).
WITH l AS (
    SELECT correlation_id, process_id, min(start_ns) AS launch_ns
    FROM launches WHERE trace_id = $trace
    GROUP BY correlation_id, process_id
), one AS (  -- the launch of a correlation id when the process is not known on one side
    SELECT correlation_id, min(launch_ns) AS launch_ns FROM l GROUP BY correlation_id
)
SELECT k.kernel_id, kl.family, k.device_id, k.start_ns, k.end_ns,
       coalesce(lp.launch_ns, CASE WHEN k.process_id IS NULL THEN o.launch_ns END) AS launch_ns
FROM kernels k
JOIN kernel_labels kl ON kl.name = k.name
LEFT JOIN l lp ON lp.correlation_id = k.correlation_id AND lp.process_id IS NOT DISTINCT FROM k.process_id
LEFT JOIN one o ON o.correlation_id = k.correlation_id
WHERE k.trace_id = $trace
UNION ALL
SELECT NULL, 'memory', m.device_id, m.start_ns, m.end_ns, o.launch_ns
FROM memops m
LEFT JOIN one o ON o.correlation_id = m.correlation_id
WHERE m.trace_id = $trace
ORDER BY start_ns, end_ns
