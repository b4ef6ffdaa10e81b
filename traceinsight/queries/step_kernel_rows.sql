-- The kernels of trace $trace with their labels, in start order, for grouping into steps.
-- Columns: kernel_id; name; kernel (short name); family; backend; phase; phase_evidence; params_json;
--          stream_id; device_id; start_ns, end_ns, dur_ns (ns); grid_x/y/z; block_x/y/z; registers_per_thread;
--          smem_bytes (bytes per block).
SELECT k.kernel_id, k.name, kl.kernel, kl.family, kl.backend, kl.phase, kl.phase_evidence, kl.params_json,
       k.stream_id, k.device_id, k.start_ns, k.end_ns, k.dur_ns,
       k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, k.registers_per_thread, k.smem_bytes
FROM kernels k JOIN kernel_labels kl ON kl.name = k.name
WHERE k.trace_id = $trace
ORDER BY k.start_ns, k.kernel_id
