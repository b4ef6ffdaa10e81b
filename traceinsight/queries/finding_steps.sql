-- The steps each finding of trace $trace brings into the document (`report.saved`: the steps that matter, by
-- `json_doc.pick_steps`' rule), from the analysis tables: of a finding's steps (findings.steps, in its order, as
-- they are: a step listed twice counts twice) those the steps table has, the first $per and the $per of longest
-- wall time (the earlier listed first among equal ones).
-- Inputs: findings, steps (the analysis tables); $trace; $per (BIGINT).
-- Columns: step (each step picked, once or more).
WITH listed AS (
    SELECT f.finding, u.step, u.pos
    FROM findings f, unnest(f.steps) WITH ORDINALITY AS u(step, pos)
    WHERE f.trace_id = $trace
), known AS (
    SELECT l.finding, l.step, l.pos, s.wall_ns,
           row_number() OVER (PARTITION BY l.finding ORDER BY l.pos) AS nth,
           row_number() OVER (PARTITION BY l.finding ORDER BY s.wall_ns DESC, l.pos) AS slowest
    FROM listed l JOIN steps s ON s.trace_id = $trace AND s.step = l.step
)
SELECT step FROM known WHERE nth <= $per OR slowest <= $per
