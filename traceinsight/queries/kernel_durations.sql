-- Every execution time of each kernel of trace $trace whose family is in $families: the samples `traceinsight
-- diff` compares between two runs (report/gate.py).
-- Parameters: $trace (trace id); $families (list of kernel families, e.g. ['gemm', 'communication']).
-- Columns: name (demangled kernel name); family; backend (or NULL); durs_ns (list of int64 ns, in start order).
SELECT k.name, any_value(kl.family) AS family, any_value(kl.backend) AS backend,
       list(k.dur_ns ORDER BY k.start_ns, k.kernel_id) AS durs_ns
FROM kernels k JOIN kernel_labels kl ON kl.name = k.name
WHERE k.trace_id = $trace AND list_contains($families, kl.family)
GROUP BY k.name
ORDER BY k.name
