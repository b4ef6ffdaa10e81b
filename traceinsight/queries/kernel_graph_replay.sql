-- Every kernel of trace $trace with the CUDA / HIP graph replay it ran in (graph_replays: the graph launch whose
-- correlation id it carries, in the same process where both rows name one), NULL when it was launched eagerly (or
-- the trace cannot tell); for the model to attribute replay kernels to steps and tell per step whether it ran under
-- a graph, and how: one replay covering the step's forward (full graph) or many replays between eager attention
-- kernels (piecewise). Kernels inside hidden replays (nsys --cuda-graph-trace=graph) are not in `kernels` at all.
-- Columns: kernel_id; replay_id (NULL: not from a graph replay); graph_id (the replay's graph, else the kernel's
--          own graphId, when the trace says); replay_kernel (0.. the kernel's place in its replay, by start);
--          replay_kernels (kernels of its replay); replay_start_ns, replay_end_ns (the replay's GPU span, ns).
WITH matched AS (
    SELECT k.kernel_id, k.start_ns, k.graph_id AS kernel_graph_id, r.replay_id, r.graph_id, r.kernel_count,
           r.gpu_start_ns, r.gpu_end_ns
    FROM kernels k
    LEFT JOIN graph_replays r
           ON r.trace_id = k.trace_id AND r.correlation_id = k.correlation_id
          AND (r.process_id IS NULL OR k.process_id IS NULL OR r.process_id = k.process_id)
    WHERE k.trace_id = $trace
    QUALIFY row_number() OVER (PARTITION BY k.kernel_id ORDER BY (r.process_id = k.process_id) DESC NULLS LAST,
                                                                  r.replay_id) = 1
)
SELECT kernel_id, replay_id, coalesce(graph_id, kernel_graph_id) AS graph_id,
       CASE WHEN replay_id IS NOT NULL
            THEN row_number() OVER (PARTITION BY replay_id ORDER BY start_ns, kernel_id) - 1 END AS replay_kernel,
       kernel_count AS replay_kernels, gpu_start_ns AS replay_start_ns, gpu_end_ns AS replay_end_ns
FROM matched
ORDER BY kernel_id
