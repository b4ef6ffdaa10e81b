-- Drops the steps stage's scratch tables once the steps are built: _step_kernel_launch (step_kernel_launch.sql:
-- a row per kernel, 1M on the 1M-kernel export) and _step_ranges (step_ranges.sql) are only the inputs of
-- _step_chosen and _step_members, which stay (step_rows.sql and step_kernels.sql read them on demand).
-- Columns: none (it returns no rows).
DROP TABLE IF EXISTS _step_kernel_launch;
DROP TABLE IF EXISTS _step_ranges;
