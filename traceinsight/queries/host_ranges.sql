-- CPU ranges (record_function annotations, NVTX ranges, profiler steps) of trace $trace that overlap any of the
-- windows [$lo[i], $hi[i]) (ns), for naming what the host did while the GPU waited (diagnose/host.py).
-- Columns: name; kind; start_ns, end_ns (ns); process_id; thread_id.
WITH w AS (SELECT unnest($lo) AS lo, unnest($hi) AS hi)
SELECT DISTINCT r.name, r.kind, r.start_ns, r.end_ns, r.process_id, r.thread_id
FROM ranges r JOIN w ON r.start_ns < w.hi AND w.lo < r.end_ns
WHERE r.trace_id = $trace AND r.side = 'cpu'
ORDER BY r.start_ns, r.end_ns DESC
