-- Attention launches with a simulated schedule (per-SM segments and tail, a predicted time): the launches
-- tail-ctas prices by their simulation (the segments are not relational: the rule reads them in Python).
-- Inputs: attention_launches (diagnose/launch_table.py).
-- Columns: pos (the launch's position in attention_launches); name; name_pos (the first pos of that name among
--          all launches).
-- Order: name_pos, then pos.
WITH named AS (
    SELECT pos, name, simulated, min(pos) OVER (PARTITION BY name) AS name_pos FROM attention_launches
)
SELECT pos, name, name_pos FROM named WHERE simulated ORDER BY name_pos, pos
