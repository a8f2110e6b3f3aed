-- Across models: the unique ops short of GOLDEN that block the most models and occurrences.
WITH o AS (
    SELECT model, signature FROM ops WHERE run_id = $run_id AND split_error IS NULL
), r AS (
    SELECT signature, op_name, status, depth, failed_stage, message FROM results
    WHERE run_id = $run_id AND depth <> 'GOLDEN'
)
SELECT r.signature, r.op_name, r.status, r.depth, r.failed_stage, r.message,
       count(DISTINCT o.model) AS models_blocked,
       count(*) AS occurrences,
       list(DISTINCT o.model ORDER BY o.model) AS models
FROM o JOIN r ON r.signature = o.signature
GROUP BY ALL
ORDER BY models_blocked DESC, occurrences DESC, r.signature
LIMIT $limit
