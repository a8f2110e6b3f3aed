-- Op signatures that $prev_run_id analysed and $run_id no longer has.
WITH occ AS (
    SELECT signature, count(*) AS occurrences, list(DISTINCT model ORDER BY model) AS models
    FROM ops WHERE run_id = $prev_run_id AND split_error IS NULL GROUP BY signature
)
SELECT p.signature, p.op_name, p.status AS previous_status, p.depth AS previous_depth,
       coalesce(occ.occurrences, 0) AS previous_occurrences, coalesce(occ.models, []) AS previous_models
FROM (SELECT * FROM results WHERE run_id = $prev_run_id) p
ANTI JOIN (SELECT signature FROM results WHERE run_id = $run_id) c ON c.signature = p.signature
LEFT JOIN occ ON occ.signature = p.signature
ORDER BY previous_occurrences DESC, p.signature
