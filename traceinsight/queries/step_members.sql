-- Creates TEMP TABLE _step_members (once per connection) and fills it for trace $trace: which kernels make
-- up which step. A range step (step_key = its range_id, >= 0) holds every kernel launched inside the range of
-- _step_chosen (range_members.sql). The attention, merge and prepare kernels outside every chosen range form
-- launch steps (step_key < 0), in kernel_id (= start) order: each attention kernel opens one, the merge kernels
-- after it join it, and prepare kernels join the next attention kernel's; a merge before the first attention
-- kernel or a prepare after the last one joins none. When the trace has range steps, launch steps are the
-- launches outside every step (warm-ups, planning runs), not steps. Each member keeps the kernel's label, family,
-- device, stream and times (from _step_kernel_launch): step_rows.sql and step_launches.sql read them here instead
-- of joining the kernels (and their labels, by full name) again.
-- Inputs: _step_kernel_launch, _step_chosen.
-- Columns: trace_id; step_key; kernel_id; ranged (TRUE for a range step); label_id; family; device_id; stream_id;
--          start_ns, end_ns (ns).
CREATE TEMP TABLE IF NOT EXISTS _step_members (trace_id INTEGER, step_key BIGINT, kernel_id BIGINT, ranged BOOLEAN,
    label_id BIGINT, family VARCHAR, device_id INTEGER, stream_id BIGINT, start_ns BIGINT, end_ns BIGINT);
DELETE FROM _step_members WHERE trace_id = $trace;
INSERT INTO _step_members
SELECT $trace, range_id, kernel_id, TRUE,  -- once per range: the other columns are the kernel's own
       any_value(label_id), any_value(family), any_value(device_id), any_value(stream_id), any_value(start_ns),
       any_value(end_ns)
FROM (
    SELECT r.range_id, k.kernel_id, k.label_id, k.family, k.device_id, k.stream_id, k.start_ns, k.end_ns
    FROM _step_chosen r JOIN _step_kernel_launch k
      ON r.side = 'cpu' AND k.launch_ns IS NOT NULL
     AND r.start_ns <= k.launch_ns AND k.launch_ns <= r.end_ns
     AND (r.thread_id IS NULL OR k.thread_id IS NULL OR r.thread_id = k.thread_id)
     AND (r.process_id IS NULL OR k.process_id IS NULL OR r.process_id = k.process_id)
    UNION ALL
    SELECT r.range_id, k.kernel_id, k.label_id, k.family, k.device_id, k.stream_id, k.start_ns, k.end_ns
    FROM _step_chosen r JOIN _step_kernel_launch k
      ON r.side = 'gpu'
     AND r.start_ns <= k.start_ns AND k.end_ns <= r.end_ns
     AND (r.device_id IS NULL OR k.device_id IS NULL OR r.device_id = k.device_id))
GROUP BY range_id, kernel_id;
INSERT INTO _step_members
WITH outside AS (  -- attention work in no step range (an anti join: NOT IN over a million ids is slow)
    SELECT DISTINCT k.kernel_id, k.label_id, k.family, k.device_id, k.stream_id, k.start_ns, k.end_ns
    FROM _step_kernel_launch k
    ANTI JOIN (SELECT kernel_id FROM _step_members WHERE trace_id = $trace) m ON m.kernel_id = k.kernel_id
    WHERE k.family IN ('attention', 'merge', 'prepare')
), loose AS (
    SELECT *,
           sum(CASE WHEN family = 'attention' THEN 1 ELSE 0 END)
               OVER (ORDER BY kernel_id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS opened
    FROM outside
), grouped AS (
    SELECT *, CASE WHEN family = 'prepare' THEN opened + 1 ELSE opened END AS grp FROM loose
)
SELECT $trace, -grp, kernel_id, FALSE, label_id, family, device_id, stream_id, start_ns, end_ns FROM grouped
WHERE grp >= 1 AND grp <= (SELECT coalesce(max(opened), 0) FROM loose)
