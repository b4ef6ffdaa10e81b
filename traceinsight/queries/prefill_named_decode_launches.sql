-- Decode launches run by a prefill-named kernel: the candidates of decode-on-prefill-kernel (FlashInfer's
-- tensor-core decode path reuses its prefill kernel). A launch counts when its kernel's short name contains one
-- of $words and it is decode: its phase says so, or its phase is unknown and a sidecar batch was recorded for its
-- step (sidecars describe decode steps).
-- Parameters: $words (list of words that mark a prefill kernel's short name, case-sensitive).
-- Inputs: attention_launches (diagnose/launch_table.py).
-- Columns: pos (the launch's position in attention_launches); name_pos (the first pos of its
--          kernel's name among the launches selected).
-- Order: name_pos (per kernel name, in the order the names first appear), then pos.
WITH chosen AS (
    SELECT pos, name_id FROM attention_launches
    WHERE len(list_filter($words, lambda w: contains(kernel, w))) > 0
      AND (phase = 'decode' OR (phase = 'unknown' AND batch_source = 'sidecar'))
)
SELECT pos, min(pos) OVER (PARTITION BY name_id) AS name_pos FROM chosen ORDER BY name_pos, pos
