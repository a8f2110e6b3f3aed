-- Op signatures analysed in $run_id that $prev_run_id did not have.
WITH occ AS (
    SELECT signature, count(*) AS occurrences, list(DISTINCT model ORDER BY model) AS models
    FROM ops WHERE run_id = $run_id AND split_error IS NULL GROUP BY signature
)
SELECT c.signature, c.op_name, c.status, c.depth, c.failed_stage, c.message,
       coalesce(occ.occurrences, 0) AS occurrences, coalesce(occ.models, []) AS models
FROM (SELECT * FROM results WHERE run_id = $run_id) c
ANTI JOIN (SELECT signature FROM results WHERE run_id = $prev_run_id) p ON p.signature = c.signature
LEFT JOIN occ ON occ.signature = c.signature
ORDER BY occurrences DESC, c.signature
