-- Creates TEMP TABLE _step_chosen (as step_range_choice.sql does) from iterations recovered from trace $trace
-- itself (model/iterations.py): one GPU-side range per iteration, its window on device $device.
-- Inputs: $trace; $ids (BIGINT[]: range ids after the trace's own); $names (VARCHAR[]); $lo, $hi (BIGINT[]: each
-- window's first activity start and last activity end, ns); $device (INTEGER, NULL when the trace has none).
-- Columns: those of `ranges` (kind 'recovered', side 'gpu').
CREATE OR REPLACE TEMP TABLE _step_chosen AS
SELECT CAST($trace AS INTEGER) AS trace_id, CAST(w.id AS BIGINT) AS range_id, w.name, 'recovered' AS kind,
       'gpu' AS side, CAST(w.lo AS BIGINT) AS start_ns, CAST(w.hi AS BIGINT) AS end_ns,
       CAST(w.hi - w.lo AS BIGINT) AS dur_ns, CAST(NULL AS BIGINT) AS process_id, CAST(NULL AS BIGINT) AS thread_id,
       CAST($device AS INTEGER) AS device_id, CAST(NULL AS BIGINT) AS stream_id, CAST(NULL AS VARCHAR) AS domain
FROM (SELECT unnest($ids) AS id, unnest($names) AS name, unnest($lo) AS lo, unnest($hi) AS hi) w
