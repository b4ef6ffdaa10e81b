-- Decode launches on a backend path known to be slow for decode: the candidates of slow-path. The backends are
-- data (slow_path.SLOW_PATHS); prefill launches are not judged.
-- Parameters: $backends (the slow paths' backend ids).
-- Inputs: attention_launches (diagnose/launch_table.py).
-- Columns: pos (the launch's position in attention_launches); name_id (its kernel's
--          name, numbered in the order the names first appear).
-- Order: name_id (per kernel name, in the order the names first appear), then pos.
SELECT pos, name_id
FROM attention_launches
WHERE list_contains($backends, backend) AND phase IS DISTINCT FROM 'prefill'
ORDER BY name_id, pos
