-- All GPU work of trace $trace for the step breakdown (model/gpu_work.py), in the order it is split in: every kernel
-- and memory operation (family 'memory') by device, start, end, then kernels before memory operations, each in
-- table order (a kernel's: its id, its place in the table); with what links it to its launch call
-- (model/launch_calls.py finds the call on arrays, among the calls of the batch's correlation ids:
-- queries/gpu_work_calls.sql). DuckDB sorts (and spills under its limit), so
-- the caller holds a record batch at a time, never every interval of a long trace (26M at 10M kernels).
-- Columns: device_id (-1 where not known); start_ns, end_ns (on the GPU); correlation_id, process_id (NULL where
--          the trace does not say; a memory operation's process is not read); family; kernel_id (-1 for a memory
--          operation).
SELECT device_id, start_ns, end_ns, correlation_id, process_id, family, kernel_id
FROM (
    SELECT coalesce(k.device_id, -1) AS device_id, k.start_ns, k.end_ns, k.correlation_id, k.process_id, kl.family,
           k.kernel_id, 0 AS src, k.kernel_id AS seq
    FROM kernels k
    JOIN kernel_labels kl ON kl.name = k.name
    WHERE k.trace_id = $trace
    UNION ALL
    SELECT coalesce(device_id, -1), start_ns, end_ns, correlation_id, NULL, 'memory', -1, 1, rowid
    FROM memops
    WHERE trace_id = $trace
)
ORDER BY device_id, start_ns, end_ns, src, seq
