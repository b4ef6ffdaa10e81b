-- Every kernel trace $trace ran, for the step breakdown (model/gpu_work.py), with its family and what links it to
-- its launch call (model/launch_calls.py finds the call and model/gpu_work.py orders all GPU work by start, on
-- arrays).
-- Columns: kernel_id; family (kernel_labels.family); device_id; start_ns, end_ns (on the GPU, ns); correlation_id,
--          process_id (NULL where the trace does not say).
SELECT k.kernel_id, kl.family, k.device_id, k.start_ns, k.end_ns, k.correlation_id, k.process_id
FROM kernels k
JOIN kernel_labels kl ON kl.name = k.name
WHERE k.trace_id = $trace
