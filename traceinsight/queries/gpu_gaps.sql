-- Stretches of trace $t with nothing on GPU $d (NULL: every device) — no kernel and no memory operation — of
-- at least $min ns, ending after $lo and starting before $hi, in time order. A gap starts at the latest end of
-- everything that started before it (work overlaps on several streams) and ends at the next start.
-- Columns: gap_start, gap_end (ns).
WITH iv AS (
    SELECT start_ns, end_ns FROM kernels WHERE trace_id = $t AND (device_id = $d OR device_id IS NULL OR $d IS NULL)
    UNION ALL
    SELECT start_ns, end_ns FROM memops WHERE trace_id = $t AND (device_id = $d OR device_id IS NULL OR $d IS NULL)
), o AS (
    SELECT start_ns, max(end_ns) OVER (ORDER BY start_ns, end_ns
                                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM iv
)
SELECT prev_end AS gap_start, start_ns AS gap_end FROM o
WHERE prev_end IS NOT NULL AND start_ns - prev_end >= $min AND start_ns > $lo AND prev_end < $hi
ORDER BY gap_start
