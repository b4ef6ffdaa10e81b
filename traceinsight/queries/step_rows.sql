-- The steps of trace $trace (_step_members, step_members.sql): per step, its kernels' count and GPU span, and
-- for a range step its range (from _step_chosen, step_range_choice.sql).
-- Inputs: _step_members, _step_chosen, kernels; $trace.
-- Columns: step_key; ranged; kernel_count; start_ns (first kernel start, ns); end_ns (last kernel end, ns);
--          range_id; name; kind; side; range_start_ns, range_end_ns (the range, ns; NULL for a launch step).
SELECT s.step_key, s.ranged, count(*) AS kernel_count, min(k.start_ns) AS start_ns, max(k.end_ns) AS end_ns,
       any_value(r.range_id) AS range_id, any_value(r.name) AS name, any_value(r.kind) AS kind,
       any_value(r.side) AS side, any_value(r.start_ns) AS range_start_ns, any_value(r.end_ns) AS range_end_ns
FROM _step_members s
JOIN kernels k ON k.trace_id = s.trace_id AND k.kernel_id = s.kernel_id
LEFT JOIN _step_chosen r ON s.ranged AND r.range_id = s.step_key
WHERE s.trace_id = $trace
GROUP BY s.step_key, s.ranged
