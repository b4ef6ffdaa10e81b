-- Every kernel of _step_kernel_launch (step_kernel_launch.sql) that belongs to one of the ranges of
-- _step_chosen (step_chosen_ranges.sql): for a CPU range, kernels whose launch call started inside it on the
-- same thread; for a GPU range, kernels that ran inside it on its device.
-- Columns: range_id; kernel_id.
SELECT r.range_id, k.kernel_id
FROM _step_chosen r JOIN _step_kernel_launch k
  ON r.side = 'cpu' AND k.launch_ns IS NOT NULL
 AND r.start_ns <= k.launch_ns AND k.launch_ns <= r.end_ns
 AND (r.thread_id IS NULL OR k.thread_id IS NULL OR r.thread_id = k.thread_id)
 AND (r.process_id IS NULL OR k.process_id IS NULL OR r.process_id = k.process_id)
UNION ALL
SELECT r.range_id, k.kernel_id
FROM _step_chosen r JOIN _step_kernel_launch k
  ON r.side = 'gpu'
 AND r.start_ns <= k.start_ns AND k.end_ns <= r.end_ns
 AND (r.device_id IS NULL OR k.device_id IS NULL OR r.device_id = k.device_id)
