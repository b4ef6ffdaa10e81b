-- The steps each finding of trace $trace brings into the document (`report.saved`: the steps that matter, by
-- `json_doc.pick_steps`' rule), from the analysis tables: of a finding's steps (findings.steps, in its order, as
-- they are: a step listed twice counts twice) those the steps table has, the first $per and the $per of longest
-- wall time (the earlier listed first among equal ones; steps.wall_ns is NOT NULL). Each finding's
-- picks are two top-$per aggregates (min_by over its listed positions, unique in a finding), not two row_number
-- windows that sort every listed step: on the 1M export (50 findings listing 557,173 steps) 0.21-0.38 s -> 0.08-0.16.
-- Inputs: findings, steps (the analysis tables); $trace; $per (BIGINT).
-- Columns: step (each step picked, once or more: one among both a finding's first and its slowest comes twice).
WITH listed AS (
    SELECT f.finding, u.step, u.pos
    FROM findings f, unnest(f.steps) WITH ORDINALITY AS u(step, pos)
    WHERE f.trace_id = $trace
), known AS (
    SELECT l.finding, l.step, l.pos, s.wall_ns
    FROM listed l JOIN steps s ON s.trace_id = $trace AND s.step = l.step
), picked AS (
    SELECT min_by(step, pos, $per) AS first,
           min_by(step, {'wall': -wall_ns, 'pos': pos}, $per) AS slowest
    FROM known GROUP BY finding
)
SELECT unnest(list_concat(first, slowest)) AS step FROM picked
