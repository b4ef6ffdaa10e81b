-- For each kernel in _step_kernel_launch (step_kernel_launch.sql) whose family is one of $families, every
-- range of _step_ranges that enclosed it: a CPU range (annotation / NVTX / profiler step) on the launching
-- thread that contains the launch call's start, or a GPU-side range (Kineto gpu_user_annotation) on the
-- kernel's device that contains the kernel.
-- Columns: kernel_id; range_id; name (range name); kind; side ('cpu'|'gpu'); start_ns, end_ns (range, ns).
SELECT k.kernel_id, r.range_id, r.name, r.kind, r.side, r.start_ns, r.end_ns
FROM _step_kernel_launch k
JOIN _step_ranges r
  ON r.side = 'cpu'
 AND k.launch_ns IS NOT NULL
 AND r.start_ns <= k.launch_ns AND k.launch_ns <= r.end_ns
 AND (r.thread_id IS NULL OR k.thread_id IS NULL OR r.thread_id = k.thread_id)
 AND (r.process_id IS NULL OR k.process_id IS NULL OR r.process_id = k.process_id)
WHERE list_contains($families, k.family)
UNION ALL
SELECT k.kernel_id, r.range_id, r.name, r.kind, r.side, r.start_ns, r.end_ns
FROM _step_kernel_launch k
JOIN _step_ranges r
  ON r.side = 'gpu'
 AND r.start_ns <= k.start_ns AND k.end_ns <= r.end_ns
 AND (r.device_id IS NULL OR k.device_id IS NULL OR r.device_id = k.device_id)
WHERE list_contains($families, k.family)
