-- Creates TEMP TABLE _step_kernel_launch: each kernel of trace $trace with its label and the call that
-- launched it. The steps stage joins ranges against this small table (DuckDB plans the range join far better
-- over a materialized table than over a CTE: 7.5 s -> 0.1 s on a 1 GB trace). A kernel whose correlation id
-- matches several launch calls has a row for each. The label is joined first (a materialized CTE): joined after
-- the launch calls, every kernel's full name (~600 bytes) went through that join's hash table (1.0 -> 0.4 CPU-s
-- on the 1M-kernel export).
-- Columns: kernel_id; label_id (its kernel_labels row: kernel_label_rows.sql); family; start_ns, end_ns (kernel,
--          ns); device_id; stream_id; launch_ns (start of the launching API call, ns, NULL when unknown);
--          thread_id; process_id (of the launching call).
CREATE OR REPLACE TEMP TABLE _step_kernel_launch AS
WITH k AS MATERIALIZED (
    SELECT k.trace_id, k.kernel_id, kl.rowid AS label_id, kl.family, k.start_ns, k.end_ns, k.device_id,
           k.stream_id, k.correlation_id, k.process_id
    FROM kernels k
    JOIN kernel_labels kl ON kl.name = k.name
    WHERE k.trace_id = $trace
)
SELECT k.kernel_id, k.label_id, k.family, k.start_ns, k.end_ns, k.device_id, k.stream_id,
       l.start_ns AS launch_ns, l.thread_id, l.process_id
FROM k
LEFT JOIN launches l ON l.trace_id = k.trace_id AND l.correlation_id = k.correlation_id
     AND (k.process_id IS NULL OR l.process_id IS NULL OR l.process_id = k.process_id)
