-- The unique ops of $run_id that got no verdict because of opbyop itself or the infrastructure:
-- TTNN ops the simulator lacks (not_simulated), bugs in opbyop (analyzer_error; simulator_error: a kernel
-- computes what the program does not mean), cluster, worker
-- or disk failures (infra_error). Not the compiler's blockers: opbyop's to fix.
WITH occ AS (
    SELECT signature, count(*) AS occurrences, list(DISTINCT model ORDER BY model) AS models
    FROM ops WHERE run_id = $run_id AND split_error IS NULL GROUP BY signature
)
SELECT r.status, st.fault, r.op_name, r.signature, r.depth, r.failed_stage, r.message,
       coalesce(occ.occurrences, 0) AS occurrences, coalesce(occ.models, []) AS models
FROM results r
JOIN statuses st ON st.status = r.status
LEFT JOIN occ ON occ.signature = r.signature
WHERE r.run_id = $run_id AND st.fault IN ('opbyop', 'infra')
ORDER BY r.status, occurrences DESC, r.signature
