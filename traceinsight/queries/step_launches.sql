-- The attention launches of trace $trace's steps (_step_members, step_members.sql), each with its merge/combine
-- and prepare kernels, and whether the trace shows it split along KV. Within a step, on each (device, stream),
-- a merge kernel belongs to the latest attention kernel that started before it and a prepare kernel to the
-- next one; kernels with no such attention kernel belong to no launch.
-- Split state, from the trace alone: a backend that splits through a merge kernel ($merge_backends) is split
-- exactly when one follows the launch — except FA3 when its prepare kernel ran >= 2 CTAs: one CTA plans
-- $fa3_cap requests, and above that cap FA3 cuts no request though its combine kernel still runs
-- (KERNELS.md §5); a backend of $never_backends never splits; for any other the trace does not tell (NULL).
-- Inputs: _step_members, kernels, kernel_labels; $trace; $merge_backends, $never_backends (VARCHAR[]);
--         $fa3_cap (BIGINT).
-- Columns: step_key; ranged; launch_id (kernel_id of the launch's attention kernel); role ('attention' |
--          'merge' | 'prepare'); split_kv, split_evidence (on the attention row, else NULL); the kernel:
--          kernel_id; name; kernel (short name); family; backend; phase; phase_evidence; params_json;
--          stream_id; device_id; start_ns, end_ns, dur_ns (ns); grid_x/y/z; block_x/y/z;
--          registers_per_thread; smem_bytes (bytes per block). In step_key, then kernel_id order.
WITH m AS (
    SELECT s.step_key, s.ranged, k.kernel_id, kl.family AS role, k.device_id, k.stream_id,
           sum(CASE WHEN kl.family = 'attention' THEN 1 ELSE 0 END) OVER (
               PARTITION BY s.step_key, k.device_id, k.stream_id ORDER BY k.kernel_id
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS opened
    FROM _step_members s
    JOIN kernels k ON k.trace_id = s.trace_id AND k.kernel_id = s.kernel_id
    JOIN kernel_labels kl ON kl.name = k.name
    WHERE s.trace_id = $trace AND kl.family IN ('attention', 'merge', 'prepare')
), roles AS (
    SELECT m.step_key, m.ranged, m.kernel_id, m.role, a.kernel_id AS launch_id
    FROM m JOIN m a
      ON a.role = 'attention' AND a.step_key = m.step_key
     AND a.device_id IS NOT DISTINCT FROM m.device_id AND a.stream_id IS NOT DISTINCT FROM m.stream_id
     AND a.opened = CASE WHEN m.role = 'prepare' THEN m.opened + 1 ELSE m.opened END
), rows AS (
    SELECT r.step_key, r.ranged, r.launch_id, r.role,
           k.kernel_id, k.name, kl.kernel, kl.family, kl.backend, kl.phase, kl.phase_evidence, kl.params_json,
           k.stream_id, k.device_id, k.start_ns, k.end_ns, k.dur_ns,
           k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, k.registers_per_thread, k.smem_bytes
    FROM roles r
    JOIN kernels k ON k.trace_id = $trace AND k.kernel_id = r.kernel_id
    JOIN kernel_labels kl ON kl.name = k.name
), per_launch AS (
    SELECT step_key, launch_id,
           count(*) FILTER (WHERE role = 'merge') AS merges,
           arg_min(kernel, kernel_id) FILTER (WHERE role = 'merge') AS first_merge,
           coalesce(max(grid_x) FILTER (WHERE role = 'prepare' AND backend = 'fa3'), 0) AS cap_ctas
    FROM rows GROUP BY step_key, launch_id
), decided AS (
    SELECT f.step_key, f.launch_id,
           CASE WHEN p.merges > 0 AND p.cap_ctas >= 2 THEN FALSE
                WHEN p.merges > 0 THEN TRUE
                WHEN list_contains($merge_backends, f.backend) THEN FALSE
                WHEN list_contains($never_backends, f.backend) THEN FALSE
           END AS split_kv,
           CASE WHEN p.merges > 0 AND p.cap_ctas >= 2
                    THEN p.first_merge || ' follows, but the prepare kernel ran ' || p.cap_ctas || ' CTAs: B > '
                         || $fa3_cap || ' requests, above FA3''s dynamic-split cap no request is cut'
                WHEN p.merges > 0
                    THEN p.first_merge || ' follows the launch on stream ' || coalesce(CAST(f.stream_id AS VARCHAR), 'None')
                WHEN list_contains($merge_backends, f.backend)
                    THEN 'no merge/combine kernel follows the launch on stream '
                         || coalesce(CAST(f.stream_id AS VARCHAR), 'None')
                         || CASE WHEN p.cap_ctas >= 2 THEN ' (and the prepare kernel ran ' || p.cap_ctas
                                 || ' CTAs: B > ' || $fa3_cap || ', above FA3''s dynamic-split cap)' ELSE '' END
                WHEN list_contains($never_backends, f.backend)
                    THEN 'the ' || f.backend || ' backend never splits along KV'
                ELSE 'split-KV of backend ' || coalesce(nullif(f.backend, ''), 'unknown') || ' is not visible in a trace'
           END AS split_evidence
    FROM rows f JOIN per_launch p ON p.step_key = f.step_key AND p.launch_id = f.launch_id
    WHERE f.role = 'attention'
)
SELECT f.step_key, f.ranged, f.launch_id, f.role, d.split_kv, d.split_evidence,
       f.* EXCLUDE (step_key, ranged, launch_id, role)
FROM rows f
LEFT JOIN decided d ON d.step_key = f.step_key AND d.launch_id = f.launch_id AND f.role = 'attention'
ORDER BY f.step_key, f.kernel_id
