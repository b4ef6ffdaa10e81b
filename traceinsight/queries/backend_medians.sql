-- Each backend's median attention-kernel time in this trace: what the alternatives of a slow path took here
-- (slow-path's evidence), the per-backend baseline. Medians as Python's statistics.median (the middle launch, or
-- the mean of the two middle ones), as a DOUBLE; backends without a launch have no row.
-- Parameters: $backends (backend ids, in the order the rows are wanted).
-- Inputs: attention_launches (diagnose/launch_table.py).
-- Columns: backend; launches; median_ns.
-- Order: as $backends lists them.
SELECT backend, count(*) AS launches, median(dur_ns)::DOUBLE AS median_ns
FROM attention_launches
WHERE list_contains($backends, backend)
GROUP BY backend
ORDER BY list_position($backends, backend)
