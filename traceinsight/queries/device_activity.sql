-- Everything device $device ran in trace $trace, in start order: its kernels (with their label family) and its
-- memory operations (family 'memop'); what model/iterations.py reads to find where the GPU waited for the host.
-- Inputs: kernels, kernel_labels, memops; $trace; $device (INTEGER, NULL for activity with no device).
-- Columns: start_ns, end_ns (ns); family.
SELECT k.start_ns, k.end_ns, kl.family FROM kernels k JOIN kernel_labels kl ON kl.name = k.name
WHERE k.trace_id = $trace AND k.device_id IS NOT DISTINCT FROM $device
UNION ALL
SELECT m.start_ns, m.end_ns, 'memop' AS family FROM memops m
WHERE m.trace_id = $trace AND m.device_id IS NOT DISTINCT FROM $device
ORDER BY 1, 2
