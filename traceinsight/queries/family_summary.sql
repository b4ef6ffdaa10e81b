-- Kernel time of trace $trace by family and backend.
-- Columns: family; backend; count; total_ns (ns); share (of all kernel time, 0..1).
WITH t AS (SELECT sum(dur_ns) AS all_ns FROM kernels WHERE trace_id = $trace)
SELECT kl.family, kl.backend, count(*) AS count, sum(k.dur_ns) AS total_ns,
       sum(k.dur_ns) / nullif(any_value(t.all_ns), 0) AS share
FROM kernels k JOIN kernel_labels kl ON kl.name = k.name, t
WHERE k.trace_id = $trace
GROUP BY ALL
ORDER BY total_ns DESC
