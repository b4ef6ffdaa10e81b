-- Launches that read their KV cache at a small share of peak HBM bandwidth, of kernels whose median launch does:
-- the candidates of kv-bandwidth. A launch is rated when its KV bytes are known (launch_kv_bytes), it took some
-- time and its step is not among $explained (steps whose time another finding already explains: imbalance);
-- its efficiency is kv_bytes / (dur_ns x 1e-9) / $peak, computed as the rule's Python did, operation for
-- operation in DOUBLE. Per kernel name, the median of its rated launches' efficiencies is Python's
-- statistics.median, written out over the sorted list: the middle value, or (a + b) / 2 of the two middle ones
-- (a sorted list per kernel, not row_number over a window: 1.3 s against 2.0 s for 10^6 launches; not DuckDB's
-- interpolating median, which is free to compute it otherwise: for two values near the largest DOUBLE it gives a
-- finite value where (a + b) / 2 overflows). A kernel is selected when that median is below $eff_min, and its
-- rows are its rated launches below $eff_min (a median below the bar implies at least one).
-- Parameters: $peak (the GPU's peak HBM bandwidth, bytes/s, > 0); $eff_min (0..1); $explained (step indices,
--             BIGINT[]; [] for none).
-- Inputs: attention_launches (diagnose/launch_table.py); launch_kv_bytes (pos, kv_bytes: the KV bytes each
--         launch reads, from its step's sidecar batch; registered by the rule, NULL or no row: unknown).
-- Columns: pos (the launch's position in attention_launches); name_id (its kernel's
--          name, numbered in the order the names first appear); kv_bytes; efficiency (0..1, of peak); median_efficiency, best_efficiency (the
--          kernel's median and largest over its rated launches).
-- Order: name_id (per kernel name, in the order the names first appear), then pos.
WITH explained AS (
    SELECT DISTINCT unnest($explained::BIGINT[]) AS step
), rated AS (
    SELECT l.pos, l.name_id, b.kv_bytes, b.kv_bytes / (l.dur_ns * 1e-9) / $peak AS efficiency
    FROM attention_launches l
    JOIN launch_kv_bytes b USING (pos)
    ANTI JOIN explained x ON x.step = l.step
    WHERE b.kv_bytes IS NOT NULL AND l.dur_ns > 0
), sorted AS (
    SELECT name_id, list_sort(list(efficiency)) AS e, max(efficiency) AS best_efficiency
    FROM rated
    GROUP BY name_id
), kernels AS (
    SELECT name_id, best_efficiency,
           CASE WHEN len(e) % 2 = 1 THEN e[len(e) // 2 + 1]
                ELSE (e[len(e) // 2] + e[len(e) // 2 + 1]) / 2 END AS median_efficiency
    FROM sorted
)
SELECT r.pos, r.name_id, r.kv_bytes, r.efficiency, k.median_efficiency, k.best_efficiency
FROM rated r JOIN kernels k USING (name_id)
WHERE k.median_efficiency < $eff_min AND r.efficiency < $eff_min
ORDER BY r.name_id, r.pos
