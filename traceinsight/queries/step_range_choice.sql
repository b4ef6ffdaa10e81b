-- Creates TEMP TABLE _step_chosen: the ranges that are steps. Every attention kernel of _step_kernel_launch
-- (step_kernel_launch.sql) takes one of the ranges of _step_ranges (step_ranges.sql) that enclosed it — a CPU
-- range on the launching thread that contains the launch call's start, or a GPU-side range (Kineto
-- gpu_user_annotation) on the kernel's device that contains the kernel — preferring CPU ranges (they say who
-- launched the work), then the outermost (earliest start, then longest), then the lowest range_id. Candidates:
-- when $names is a list (the range names a --step-pattern matched), only ranges of those names; else only
-- ranges that enclose at most $limit attention kernels (a range around more than half of them wraps the run,
-- it is not a step). A table, not a CTE: range_members.sql joins it to the kernels, and with a CTE DuckDB
-- cannot see how many ranges there are and picks a nested loop (100K kernels x 23K ranges: 3.7 s; 0.04 s).
-- Inputs: _step_kernel_launch, _step_ranges; $limit (BIGINT); $names (VARCHAR[] or NULL).
-- Columns: those of `ranges`.
CREATE OR REPLACE TEMP TABLE _step_chosen AS
WITH enclosing AS (
    SELECT k.kernel_id, r.range_id, r.name, r.side, r.start_ns, r.end_ns
    FROM _step_kernel_launch k
    JOIN _step_ranges r
      ON r.side = 'cpu'
     AND k.launch_ns IS NOT NULL
     AND r.start_ns <= k.launch_ns AND k.launch_ns <= r.end_ns
     AND (r.thread_id IS NULL OR k.thread_id IS NULL OR r.thread_id = k.thread_id)
     AND (r.process_id IS NULL OR k.process_id IS NULL OR r.process_id = k.process_id)
    WHERE k.family = 'attention'
    UNION
    SELECT k.kernel_id, r.range_id, r.name, r.side, r.start_ns, r.end_ns
    FROM _step_kernel_launch k
    JOIN _step_ranges r
      ON r.side = 'gpu'
     AND r.start_ns <= k.start_ns AND k.end_ns <= r.end_ns
     AND (r.device_id IS NULL OR k.device_id IS NULL OR r.device_id = k.device_id)
    WHERE k.family = 'attention'
), candidates AS (
    SELECT e.*, count(*) OVER (PARTITION BY e.range_id) AS enclosed
    FROM enclosing e
), picked AS (  -- each kernel's first candidate in that order: a hash aggregate (arg_min of the order as a
                -- tuple; range_id makes it unique), not a row_number window that sorts every candidate by kernel
    SELECT arg_min(range_id, (side <> 'cpu', start_ns, start_ns - end_ns, range_id)) AS range_id
    FROM candidates
    WHERE CASE WHEN $names IS NULL THEN enclosed <= $limit ELSE list_contains($names, name) END
    GROUP BY kernel_id
)
SELECT r.* FROM _step_ranges r
WHERE r.range_id IN (SELECT range_id FROM picked)
