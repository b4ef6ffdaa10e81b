-- The steps of trace $trace (_step_members, step_members.sql): per step, its kernels' count and GPU span, and
-- for a range step its range (from _step_chosen, step_range_choice.sql); in step_key order. The members are
-- counted first and the range joined to the counts (a row per step, not per kernel).
-- Inputs: _step_members, _step_chosen; $trace.
-- Columns: step_key; ranged; kernel_count; start_ns (first kernel start, ns); end_ns (last kernel end, ns);
--          range_id; name; kind; side; range_start_ns, range_end_ns (the range, ns; NULL for a launch step).
WITH s AS (
    SELECT step_key, ranged, count(*) AS kernel_count, min(start_ns) AS start_ns, max(end_ns) AS end_ns
    FROM _step_members
    WHERE trace_id = $trace
    GROUP BY step_key, ranged
)
SELECT s.step_key, s.ranged, s.kernel_count, s.start_ns, s.end_ns, r.range_id, r.name, r.kind, r.side,
       r.start_ns AS range_start_ns, r.end_ns AS range_end_ns
FROM s
LEFT JOIN _step_chosen r ON s.ranged AND r.range_id = s.step_key
ORDER BY s.step_key
