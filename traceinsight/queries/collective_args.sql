-- The collective arguments torch.distributed recorded on the kernels of trace $trace (collectives), one row per
-- correlation id (the last recorded where the trace repeats one), for matching a run's ranks (model/ranks.py).
-- Columns: correlation_id; name; in_nelems; out_nelems; group_size; dtype; group_name; group_desc; group_ranks; seq.
SELECT correlation_id, name, in_nelems, out_nelems, group_size, dtype, group_name, group_desc, group_ranks, seq
FROM collectives
WHERE trace_id = $trace
QUALIFY row_number() OVER (PARTITION BY correlation_id ORDER BY rowid DESC) = 1
ORDER BY correlation_id
