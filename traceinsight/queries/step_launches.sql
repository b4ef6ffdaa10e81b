-- The attention launches of trace $trace's steps (_step_members, step_members.sql), each with its merge/combine
-- and prepare kernels, and whether the trace shows it split along KV. Within a step, on each (device, stream),
-- a merge kernel belongs to the latest attention kernel that started before it and a prepare kernel to the
-- next one; kernels with no such attention kernel belong to no launch.
-- Split state, from the trace alone, by the rule each attention kernel name has (model/split_signal.toml, resolved
-- in Python into the parallel lists $split_names/_signals/_axes/_notes/_subjects): signal 'merge' = split exactly
-- when a merge kernel follows the launch — except FA3 when its prepare kernel ran >= 2 CTAs: one CTA plans $fa3_cap
-- requests, and above that cap FA3 cuts no request though its combine kernel still runs (KERNELS.md §5) — and,
-- where the rule names the grid axis that counts KV parts and the trace has the grid, 1 part = not split (the
-- merge kernel only copies); 'never' = not split; 'always' (the merge kernel runs after every launch) and names
-- no rule covers: unknown (NULL).
-- Inputs: _step_members, kernels, kernel_labels; $trace; $split_names, $split_signals, $split_axes ('x' | 'y' |
--         'z' | ''), $split_notes, $split_subjects (VARCHAR[], one entry per attention kernel name);
--         $fa3_cap (BIGINT).
-- Columns: step_key; ranged; launch_id (kernel_id of the launch's attention kernel); role ('attention' |
--          'merge' | 'prepare'); split_kv, split_evidence (on the attention row, else NULL); the kernel:
--          kernel_id; label_id (its kernel_labels row: kernel_label_rows.sql gives the name, short name, family,
--          backend, phase, phase_evidence, params_json); stream_id; device_id; start_ns, end_ns, dur_ns (ns);
--          grid_x/y/z; block_x/y/z; registers_per_thread; smem_bytes (bytes per block). In step_key, then
--          kernel_id order.
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
           k.kernel_id, kl.rowid AS label_id, k.name, kl.kernel, kl.family, kl.backend,
           k.stream_id, k.device_id, k.start_ns, k.end_ns, k.dur_ns,
           k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, k.registers_per_thread, k.smem_bytes
    FROM roles r
    JOIN kernels k ON k.trace_id = $trace AND k.kernel_id = r.kernel_id
    JOIN kernel_labels kl ON kl.name = k.name
), rules AS (
    SELECT unnest(CAST($split_names AS VARCHAR[])) AS name, unnest(CAST($split_signals AS VARCHAR[])) AS signal,
           unnest(CAST($split_axes AS VARCHAR[])) AS axis, unnest(CAST($split_notes AS VARCHAR[])) AS note,
           unnest(CAST($split_subjects AS VARCHAR[])) AS subject
), per_launch AS (
    SELECT step_key, launch_id,
           count(*) FILTER (WHERE role = 'merge') AS merges,
           arg_min(kernel, kernel_id) FILTER (WHERE role = 'merge') AS first_merge,
           coalesce(max(grid_x) FILTER (WHERE role = 'prepare' AND backend = 'fa3'), 0) AS cap_ctas
    FROM rows GROUP BY step_key, launch_id
), ruled AS (
    SELECT f.*, p.merges, p.first_merge, p.cap_ctas, r.signal, r.axis, r.note, r.subject,
           CASE r.axis WHEN 'x' THEN nullif(f.grid_x, 0) WHEN 'y' THEN nullif(f.grid_y, 0)
                       WHEN 'z' THEN nullif(f.grid_z, 0) END AS parts,
           ' on stream ' || coalesce(CAST(f.stream_id AS VARCHAR), 'None') AS on_stream
    FROM rows f
    JOIN per_launch p ON p.step_key = f.step_key AND p.launch_id = f.launch_id
    LEFT JOIN rules r ON r.name = f.name
    WHERE f.role = 'attention'
), decided AS (
    SELECT step_key, launch_id,
           CASE WHEN merges > 0 AND cap_ctas >= 2 THEN FALSE
                WHEN merges > 0 AND parts = 1 THEN FALSE
                WHEN merges > 0 AND parts > 1 THEN TRUE
                WHEN merges > 0 AND signal = 'always' THEN NULL
                WHEN merges > 0 THEN TRUE
                WHEN signal IN ('merge', 'never') THEN FALSE
           END AS split_kv,
           CASE WHEN merges > 0 AND cap_ctas >= 2
                    THEN first_merge || ' follows, but the prepare kernel ran ' || cap_ctas || ' CTAs: B > '
                         || $fa3_cap || ' requests, above FA3''s dynamic-split cap no request is cut'
                WHEN merges > 0 AND parts = 1
                    THEN first_merge || ' follows the launch' || on_stream || ', but grid.' || axis || ' = 1 '
                         || note || ': no request is cut, the merge kernel only copies'
                WHEN merges > 0 AND parts > 1
                    THEN first_merge || ' follows the launch' || on_stream || '; grid.' || axis || ' = ' || parts
                         || ' ' || note
                WHEN merges > 0 AND signal = 'always'
                    THEN first_merge || ' runs after every launch of ' || subject || ', split or not; which '
                         || 'requests were cut is device data'
                WHEN merges > 0
                    THEN first_merge || ' follows the launch' || on_stream
                WHEN signal = 'merge'
                    THEN 'no merge/combine kernel follows the launch' || on_stream
                         || CASE WHEN cap_ctas >= 2 THEN ' (and the prepare kernel ran ' || cap_ctas
                                 || ' CTAs: B > ' || $fa3_cap || ', above FA3''s dynamic-split cap)' ELSE '' END
                WHEN signal = 'never'
                    THEN subject || ' never splits along KV'
                ELSE 'split-KV of backend ' || coalesce(nullif(backend, ''), 'unknown') || ' is not visible in a trace'
           END AS split_evidence
    FROM ruled
)
SELECT f.step_key, f.ranged, f.launch_id, f.role, d.split_kv, d.split_evidence,
       f.* EXCLUDE (step_key, ranged, launch_id, role, name, kernel, family, backend)
FROM rows f
LEFT JOIN decided d ON d.step_key = f.step_key AND d.launch_id = f.launch_id AND f.role = 'attention'
ORDER BY f.step_key, f.kernel_id
