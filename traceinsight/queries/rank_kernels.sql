-- Every kernel of trace $trace (one rank of a distributed run) with its label and the start of the host call that
-- launched it, in GPU start order: what model/ranks.py reads of each rank to find its collectives, put its
-- kernels in its steps and total their time by family. A kernel whose correlation id matches several launch calls
-- keeps the earliest.
-- Columns: kernel_id; name; family; backend (kernel_labels); stream_id; device_id; correlation_id;
--          start_ns, end_ns, dur_ns (GPU, ns); launch_ns (start of the launching API call, ns, NULL when unknown).
SELECT k.kernel_id, k.name, kl.family, kl.backend, k.stream_id, k.device_id, k.correlation_id,
       k.start_ns, k.end_ns, k.dur_ns, min(l.start_ns) AS launch_ns
FROM kernels k
JOIN kernel_labels kl ON kl.name = k.name
LEFT JOIN launches l ON l.trace_id = k.trace_id AND l.correlation_id = k.correlation_id
     AND (k.process_id IS NULL OR l.process_id IS NULL OR l.process_id = k.process_id)
WHERE k.trace_id = $trace
GROUP BY ALL
ORDER BY k.start_ns, k.kernel_id
