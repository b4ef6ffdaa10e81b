-- Creates TEMP TABLE _step_chosen: the ranges of _step_ranges (step_ranges.sql) whose range_id is in
-- $range_ids, the steps' ranges, for range_members.sql. A table, not a CTE: with a CTE DuckDB cannot see how
-- many ranges there are and joins them to the kernels by a nested loop (100K kernels x 23K ranges: 3.7 s;
-- with the table it picks its inequality join: 0.04 s).
-- Columns: those of `ranges`.
CREATE OR REPLACE TEMP TABLE _step_chosen AS
SELECT r.* FROM _step_ranges r
WHERE r.range_id IN (SELECT unnest($range_ids))
