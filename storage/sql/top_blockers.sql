-- Across models: the unique ops the compiler or the device failed that block the most models and
-- occurrences (opbyop's own gaps are in query opbyop_gaps).
WITH o AS (
    SELECT model, signature FROM ops WHERE run_id = $run_id AND split_error IS NULL
), r AS (
    SELECT r.signature, r.op_name, r.status, r.depth, r.failed_stage, r.message
    FROM results r JOIN statuses st ON st.status = r.status
    WHERE r.run_id = $run_id AND st.verdict AND r.status <> 'success'
)
SELECT r.signature, r.op_name, r.status, r.depth, r.failed_stage, r.message,
       count(DISTINCT o.model) AS models_blocked,
       count(*) AS occurrences,
       list(DISTINCT o.model ORDER BY o.model) AS models
FROM o JOIN r ON r.signature = o.signature
GROUP BY ALL
ORDER BY models_blocked DESC, occurrences DESC, r.signature
LIMIT $limit
