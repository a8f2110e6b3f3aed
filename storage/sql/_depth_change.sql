WITH cur AS (
    SELECT signature, op_name, status, depth, failed_stage, message FROM results WHERE run_id = $run_id
), prev AS (
    SELECT signature, status, depth, failed_stage, message FROM results WHERE run_id = $prev_run_id
), occ AS (
    SELECT signature, count(*) AS occurrences, list(DISTINCT model ORDER BY model) AS models
    FROM ops WHERE run_id = $run_id AND split_error IS NULL GROUP BY signature
)
SELECT c.signature, c.op_name,
       p.depth AS previous_depth, c.depth, sp.rank AS previous_rank, sc.rank AS rank,
       p.status AS previous_status, c.status, c.failed_stage, c.message, p.message AS previous_message,
       coalesce(occ.occurrences, 0) AS occurrences, coalesce(occ.models, []) AS models
FROM cur c
JOIN prev p ON p.signature = c.signature
JOIN stages sc ON sc.stage = c.depth
JOIN stages sp ON sp.stage = p.depth
LEFT JOIN occ ON occ.signature = c.signature
