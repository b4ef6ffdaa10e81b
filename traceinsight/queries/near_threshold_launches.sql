-- Split launches whose batch is a few requests below their kernel's split-KV threshold B_th: the candidates of
-- threshold-proximity ("N more requests and split-KV turns off"). Close means 0 < B_th - B <= max($margin_min,
-- $margin_fraction x B_th), for launches of $backends with split-KV on and B known.
-- Parameters: $backends (list of backends); $margin_min (requests); $margin_fraction (of B_th).
-- Inputs: attention_launches (diagnose/launch_table.py).
-- Columns: pos (the launch's position in attention_launches); name_id (its kernel's
--          name, numbered in the order the names first appear); b_threshold; batch_size.
-- Order: name_id (per kernel name, in the order the names first appear), then pos.
SELECT pos, name_id, b_threshold, batch_size
FROM attention_launches
WHERE list_contains($backends, backend) AND b_threshold <> 0
  AND split_kv AND batch_size IS NOT NULL
  AND b_threshold - batch_size > 0
  AND b_threshold - batch_size <= greatest($margin_min, $margin_fraction * b_threshold)
ORDER BY name_id, pos
