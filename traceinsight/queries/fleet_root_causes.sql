-- Each rule that fired in a fleet dataset (traceinsight/fleet/report.py), across its traces. Inputs: `findings`
-- (one row per finding, keyed by the partition column `trace`) and `summary` (one row per analyzed trace).
-- As a root cause (supports IS NULL) a rule costs its findings' attributed_saving_ns (bounded step by step by the
-- time they come from; saving_basis 'span': time between steps, else the steps' wall time); as evidence it
-- supports another rule's root cause and costs nothing of its own.
-- Columns: rule_id; severity (the worst it had as a root cause, else as evidence); traces (where it is a root
--          cause); share_of_traces (traces / analyzed traces, 0..1); findings (root-cause findings); steps
--          (distinct (trace, step) its root-cause findings name); lost_ns = lost_steps_ns + lost_between_ns (ns);
--          worst_trace, worst_trace_lost_ns (the trace it cost most; ties: the first trace by name);
--          evidence_traces (traces where it fired as evidence for another root cause).
-- Order: largest loss first, then most traces, then rule_id. Rules that were only evidence have traces = 0.
WITH f AS (
    SELECT trace, rule_id, severity, steps, supports IS NULL AS root,
           coalesce(attributed_saving_ns, 0) AS lost_ns, saving_basis,
           CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END AS rank
    FROM findings
), per_trace AS (
    SELECT rule_id, trace, sum(lost_ns) AS lost_ns,
           row_number() OVER (PARTITION BY rule_id ORDER BY sum(lost_ns) DESC, trace) AS nth
    FROM f WHERE root
    GROUP BY rule_id, trace
), steps AS (
    SELECT rule_id, count(*) AS steps
    FROM (SELECT DISTINCT rule_id, trace, unnest(steps) AS step FROM f WHERE root)
    GROUP BY rule_id
), rules AS (
    SELECT rule_id,
           coalesce(min(rank) FILTER (WHERE root), min(rank)) AS rank,
           count(DISTINCT trace) FILTER (WHERE root) AS traces,
           count(*) FILTER (WHERE root) AS findings,
           coalesce(sum(lost_ns) FILTER (WHERE root), 0)::BIGINT AS lost_ns,
           coalesce(sum(lost_ns) FILTER (WHERE root AND saving_basis = 'span'), 0)::BIGINT AS lost_between_ns,
           count(DISTINCT trace) FILTER (WHERE NOT root) AS evidence_traces
    FROM f
    GROUP BY rule_id
)
SELECT r.rule_id, ['critical', 'warning', 'info'][r.rank + 1] AS severity, r.traces,
       r.traces / nullif((SELECT count(*) FROM summary), 0) AS share_of_traces, r.findings,
       coalesce(s.steps, 0) AS steps, r.lost_ns, r.lost_ns - r.lost_between_ns AS lost_steps_ns,
       r.lost_between_ns, w.trace AS worst_trace, w.lost_ns::BIGINT AS worst_trace_lost_ns, r.evidence_traces
FROM rules r
LEFT JOIN steps s USING (rule_id)
LEFT JOIN per_trace w ON w.rule_id = r.rule_id AND w.nth = 1
ORDER BY r.lost_ns DESC, r.traces DESC, r.rule_id
