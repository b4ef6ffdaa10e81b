-- The attention launches of trace $trace's steps (_step_members, step_members.sql), each with its merge/combine
-- and prepare kernels, and whether the trace shows it split along KV. Within a step, on each (device, stream),
-- a merge kernel belongs to the latest attention kernel that started before it and a prepare kernel to the
-- next one (two running aggregates over one window); kernels with no such attention kernel belong to no launch.
-- Split state, from the trace alone, by the rule each attention kernel name has (model/split_signal.toml, resolved
-- in Python into the parallel lists $split_names/_signals/_axes/_notes/_subjects, joined to the labels, not to
-- every launch's full name): signal 'merge' = split exactly
-- when a merge kernel follows the launch — except FA3 when its prepare kernel ran >= 2 CTAs: one CTA plans $fa3_cap
-- requests, and above that cap FA3 cuts no request though its combine kernel still runs (KERNELS.md §5) — and,
-- where the rule names the grid axis that counts KV parts and the trace has the grid, 1 part = not split (the
-- merge kernel only copies); 'never' = not split; 'always' (the merge kernel runs after every launch) and names
-- no rule covers: unknown (NULL).
-- Inputs: _step_members, kernel_rows (the kernels' own columns: no name is read, so not the `kernels` view),
--         kernel_labels; $trace; $split_names, $split_signals, $split_axes ('x' | 'y' |
--         'z' | ''), $split_notes, $split_subjects (VARCHAR[], one entry per attention kernel name);
--         $fa3_cap (BIGINT).
-- Columns: step_key; launch_id (kernel_id of the launch's attention kernel); role ('attention' | 'merge' |
--          'prepare'); merges, prepares (how many rows of each role follow the attention row; on the attention
--          row, else NULL); split_kv, split_evidence (on the attention row, else NULL); the kernel: kernel_id;
--          label_id (its kernel_labels row: kernel_label_rows.sql gives the name, short name, family, backend,
--          phase, phase_evidence, params_json); stream_id; device_id; start_ns, end_ns, dur_ns (ns); grid_x/y/z;
--          block_x/y/z; registers_per_thread; smem_bytes (bytes per block). In step_key, launch_id order; within a
--          launch its attention row, its merge rows, then its prepare rows, each in kernel_id order.
WITH m AS (
    SELECT step_key, kernel_id, label_id, family AS role, device_id, stream_id
    FROM _step_members
    WHERE trace_id = $trace AND family IN ('attention', 'merge', 'prepare')
), att AS (
    SELECT * FROM m WHERE role = 'attention'
), roles AS (  -- an attention kernel is its own launch; the others find theirs by an as-of join (not a window
               -- partitioned by step and stream: 228K partitions on the 1M-kernel export, 3x the time)
    SELECT step_key, kernel_id, label_id, role, kernel_id AS launch_id FROM att
    UNION ALL
    SELECT o.step_key, o.kernel_id, o.label_id, o.role, a.kernel_id
    FROM m o ASOF JOIN att a
      ON a.step_key = o.step_key AND a.device_id IS NOT DISTINCT FROM o.device_id
     AND a.stream_id IS NOT DISTINCT FROM o.stream_id AND a.kernel_id <= o.kernel_id
    WHERE o.role = 'merge'
    UNION ALL
    SELECT o.step_key, o.kernel_id, o.label_id, o.role, a.kernel_id
    FROM m o ASOF JOIN att a
      ON a.step_key = o.step_key AND a.device_id IS NOT DISTINCT FROM o.device_id
     AND a.stream_id IS NOT DISTINCT FROM o.stream_id AND a.kernel_id >= o.kernel_id
    WHERE o.role = 'prepare'
), rules AS (
    SELECT unnest(CAST($split_names AS VARCHAR[])) AS name, unnest(CAST($split_signals AS VARCHAR[])) AS signal,
           unnest(CAST($split_axes AS VARCHAR[])) AS axis, unnest(CAST($split_notes AS VARCHAR[])) AS note,
           unnest(CAST($split_subjects AS VARCHAR[])) AS subject
), labels AS (  -- each label's short name, backend and split rule: a row per distinct kernel name
    SELECT kl.rowid AS label_id, kl.kernel, kl.backend, r.signal, r.axis, r.note, r.subject
    FROM kernel_labels kl
    LEFT JOIN rules r ON r.name = kl.name
), rows AS (
    SELECT r.step_key, r.launch_id, r.role, k.kernel_id, r.label_id,
           k.stream_id, k.device_id, k.start_ns, k.end_ns, k.dur_ns,
           k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, k.registers_per_thread, k.smem_bytes
    FROM roles r
    JOIN kernel_rows k ON k.trace_id = $trace AND k.kernel_id = r.kernel_id
), per_launch AS (  -- the merge and prepare kernels of each launch
    SELECT f.step_key, f.launch_id,
           count(*) FILTER (WHERE f.role = 'merge') AS merges,
           count(*) FILTER (WHERE f.role = 'prepare') AS prepares,
           arg_min(l.kernel, f.kernel_id) FILTER (WHERE f.role = 'merge') AS first_merge,
           coalesce(max(f.grid_x) FILTER (WHERE f.role = 'prepare' AND l.backend = 'fa3'), 0) AS cap_ctas
    FROM rows f JOIN labels l ON l.label_id = f.label_id
    WHERE f.role <> 'attention'
    GROUP BY f.step_key, f.launch_id
), ruled AS (
    SELECT f.*, l.backend, coalesce(p.merges, 0) AS merges, coalesce(p.prepares, 0) AS prepares,
           p.first_merge, coalesce(p.cap_ctas, 0) AS cap_ctas, l.signal, l.axis, l.note, l.subject,
           CASE l.axis WHEN 'x' THEN nullif(f.grid_x, 0) WHEN 'y' THEN nullif(f.grid_y, 0)
                       WHEN 'z' THEN nullif(f.grid_z, 0) END AS parts,
           ' on stream ' || coalesce(CAST(f.stream_id AS VARCHAR), 'None') AS on_stream
    FROM rows f
    JOIN labels l ON l.label_id = f.label_id
    LEFT JOIN per_launch p ON p.step_key = f.step_key AND p.launch_id = f.launch_id
    WHERE f.role = 'attention'
), decided AS (
    SELECT step_key, launch_id, role, merges, prepares,
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
           END AS split_evidence,
           kernel_id, label_id, stream_id, device_id, start_ns, end_ns, dur_ns, grid_x, grid_y, grid_z,
           block_x, block_y, block_z, registers_per_thread, smem_bytes
    FROM ruled
)
SELECT * FROM decided  -- the attention rows, with their launch's split state
UNION ALL
SELECT step_key, launch_id, role, NULL, NULL, NULL, NULL, * EXCLUDE (step_key, launch_id, role)
FROM rows WHERE role <> 'attention'
ORDER BY step_key, launch_id, CASE role WHEN 'attention' THEN 0 WHEN 'merge' THEN 1 ELSE 2 END, kernel_id
