-- Every unique op of $run_id with its outcome, how often it occurs and in which models.
WITH occ AS (
    SELECT signature, count(*) AS occurrences, list(DISTINCT model ORDER BY model) AS models
    FROM ops WHERE run_id = $run_id AND split_error IS NULL GROUP BY signature
)
SELECT r.signature, r.op_name, r.status, r.fault, r.depth, r.failed_stage, r.message, r.narrowing,
       coalesce(occ.occurrences, 0) AS occurrences, coalesce(occ.models, []) AS models,
       round(epoch(r.ended_at) - epoch(r.started_at), 3) AS seconds, r.reused_from
FROM results r LEFT JOIN occ ON occ.signature = r.signature
WHERE r.run_id = $run_id
ORDER BY r.op_name, r.signature
