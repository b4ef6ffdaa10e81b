-- Every kernel of one step of trace $trace (_step_members, step_members.sql: step $step_key) in start order, its
-- label by id; for `explain`, which compares a step's kernels with its neighbours', and the steps stage's check of
-- a prefill-shaped step's norm grid.
-- Columns: as step_launches.sql's kernel columns: kernel_id; label_id (kernel_label_rows.sql); stream_id;
--          device_id; start_ns, end_ns, dur_ns (ns); grid_x/y/z; block_x/y/z; registers_per_thread; smem_bytes.
SELECT k.kernel_id, s.label_id, k.stream_id, k.device_id, k.start_ns, k.end_ns, k.dur_ns,
       k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, k.registers_per_thread, k.smem_bytes
FROM _step_members s
JOIN kernel_rows k ON k.trace_id = s.trace_id AND k.kernel_id = s.kernel_id
WHERE s.trace_id = $trace AND s.step_key = $step_key
ORDER BY k.start_ns, k.kernel_id
