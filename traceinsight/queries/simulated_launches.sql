-- Attention launches with a simulated schedule (per-SM segments and tail, a predicted time): the launches
-- tail-ctas prices by their simulation (the segments are not relational: the rule reads them in Python).
-- Inputs: attention_launches (diagnose/launch_table.py).
-- Columns: pos (the launch's position in attention_launches); name_id (its kernel's
--          name, numbered in the order the names first appear).
-- Order: name_id, then pos.
SELECT pos, name_id FROM attention_launches WHERE simulated ORDER BY name_id, pos
