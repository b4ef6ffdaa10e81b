-- Everything that kept GPU $d (NULL: every device) of trace $t busy — every kernel and every memory operation —
-- in time order (start, then end). The idle gaps between them are the stretches past the latest end of
-- everything that started before (model/idle_gaps.py: a running maximum over this order).
-- Columns: start_ns, end_ns (ns).
SELECT start_ns, end_ns FROM (
    SELECT start_ns, end_ns FROM kernels WHERE trace_id = $t AND (device_id = $d OR device_id IS NULL OR $d IS NULL)
    UNION ALL
    SELECT start_ns, end_ns FROM memops WHERE trace_id = $t AND (device_id = $d OR device_id IS NULL OR $d IS NULL)
)
ORDER BY start_ns, end_ns
