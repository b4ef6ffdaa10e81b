-- What the host did within the windows [$lo[i], $hi[i]) (ns) of trace $trace, for naming what the host did while the
-- GPU waited (diagnose/host.py): its CPU ranges (record_function annotations, NVTX ranges, profiler steps) that
-- overlap a window, in start order (longest first), then its host operations (host_ops: torch.profiler's CPU ops and
-- Python functions) that overlap one, in file order.
-- Columns: name; kind (the range's kind, or the op's category); start_ns, end_ns (ns); process_id; thread_id.
WITH w AS (SELECT unnest($lo) AS lo, unnest($hi) AS hi),
cpu_ranges AS (
    SELECT DISTINCT r.name, r.kind, r.start_ns, r.end_ns, r.process_id, r.thread_id
    FROM ranges r JOIN w ON r.start_ns < w.hi AND w.lo < r.end_ns
    WHERE r.trace_id = $trace AND r.side = 'cpu'
),
ops AS (
    SELECT o.op_id, o.name, o.category AS kind, o.start_ns, o.end_ns, o.process_id, o.thread_id
    FROM host_ops o
    WHERE o.trace_id = $trace AND o.start_ns < (SELECT max(hi) FROM w) AND (SELECT min(lo) FROM w) < o.end_ns
      AND EXISTS (SELECT 1 FROM w WHERE o.start_ns < w.hi AND w.lo < o.end_ns)
)
SELECT name, kind, start_ns, end_ns, process_id, thread_id
FROM (SELECT 0 AS part, NULL::BIGINT AS op_id, * FROM cpu_ranges
      UNION ALL BY NAME
      SELECT 1 AS part, * FROM ops)
ORDER BY part, op_id, start_ns, end_ns DESC
