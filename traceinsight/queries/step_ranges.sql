-- Creates TEMP TABLE _step_ranges: the ranges of trace $trace (see step_kernel_launch.sql for why a table).
-- Columns: those of `ranges`.
CREATE OR REPLACE TEMP TABLE _step_ranges AS
SELECT * FROM ranges WHERE trace_id = $trace
