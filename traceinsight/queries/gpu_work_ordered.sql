-- All GPU work of trace $trace for the step breakdown (model/gpu_work.py), in the order it is split in: every kernel
-- and memory operation (family 'memory') by device, start, end, then kernels before memory operations, each in
-- table order; with the start of the host call that launched it. DuckDB sorts (and spills under its limit), so the
-- caller holds a record batch at a time, never every interval of a long trace (26M at 10M kernels).
-- The launch call: a kernel's is the earliest call of its (correlation id, process), a NULL process matching a NULL
-- one, else for a kernel of NULL process the earliest of its correlation id whatever the process; a memory
-- operation's the earliest of its correlation id; -1 when none.
-- Columns: device_id (-1 where not known); start_ns, end_ns (on the GPU); launch_ns (-1: not known); family;
--          kernel_id (-1 for a memory operation).
WITH pair AS (
    SELECT correlation_id, process_id, min(start_ns) AS start_ns
    FROM launches WHERE trace_id = $trace
    GROUP BY correlation_id, process_id
), corr AS (
    SELECT correlation_id, min(start_ns) AS start_ns FROM pair GROUP BY correlation_id
), work AS (
    SELECT coalesce(k.device_id, -1) AS device_id, k.start_ns, k.end_ns,
           coalesce(p.start_ns, CASE WHEN k.process_id IS NULL THEN c.start_ns END, -1) AS launch_ns,
           kl.family, k.kernel_id, 0 AS src, k.rowid AS seq
    FROM kernels k
    JOIN kernel_labels kl ON kl.name = k.name
    LEFT JOIN pair p ON p.correlation_id = k.correlation_id AND p.process_id IS NOT DISTINCT FROM k.process_id
    LEFT JOIN corr c ON c.correlation_id = k.correlation_id
    WHERE k.trace_id = $trace
    UNION ALL
    SELECT coalesce(m.device_id, -1), m.start_ns, m.end_ns, coalesce(c.start_ns, -1), 'memory', -1, 1, m.rowid
    FROM memops m
    LEFT JOIN corr c ON c.correlation_id = m.correlation_id
    WHERE m.trace_id = $trace
)
SELECT device_id, start_ns, end_ns, launch_ns, family, kernel_id
FROM work
ORDER BY device_id, start_ns, end_ns, src, seq
