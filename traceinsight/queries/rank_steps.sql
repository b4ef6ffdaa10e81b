-- The iterations of trace $trace that a multi-rank run matches across its ranks (model/ranks.py): torch.profiler's
-- ProfilerStep#N ranges on the host, in start order. A run whose ranks have none is matched by its collectives
-- alone (one step).
-- Columns: name ('ProfilerStep#551'); start_ns, end_ns (host, ns).
SELECT name, start_ns, end_ns
FROM ranges
WHERE trace_id = $trace AND kind = 'profiler_step' AND side = 'cpu'
ORDER BY start_ns, range_id
