-- How each step of trace $trace (_step_members, step_members.sql) ran under CUDA / HIP graphs, from _kernel_replay
-- (kernel_graph_replay.sql's rows as a temp table): the graph replays its kernels came from, and how many of its
-- kernels and of its attention kernels those replays held. A step whose attention kernels all ran inside replays
-- was replayed whole (full graph); one whose replays ran between eager attention kernels, piecewise.
-- Inputs: _step_members (each member's family: no join of the kernels to their labels by full name),
--         _kernel_replay; $trace.
-- Columns: step_key; replays (distinct graph replays); graph_kernels, kernels (kernels from replays, all);
--          graph_attention, attention (attention kernels from replays, all).
SELECT m.step_key,
       count(DISTINCT r.replay_id) AS replays,
       count(r.replay_id) AS graph_kernels,
       count(*) AS kernels,
       count(r.replay_id) FILTER (WHERE m.family = 'attention') AS graph_attention,
       count(*) FILTER (WHERE m.family = 'attention') AS attention
FROM _step_members m
JOIN _kernel_replay r ON r.kernel_id = m.kernel_id
WHERE m.trace_id = $trace
GROUP BY m.step_key
