-- Per model: the unique ops that keep it from passing (short of GOLDEN), heaviest first, weighted
-- by how often each occurs in that model.
WITH o AS (
    SELECT model, signature, position, framework_op FROM ops WHERE run_id = $run_id AND split_error IS NULL
), r AS (
    SELECT signature, op_name, status, depth, failed_stage, message FROM results
    WHERE run_id = $run_id AND depth <> 'GOLDEN'
), totals AS (
    SELECT model, count(*) AS model_ops FROM o GROUP BY model
)
SELECT o.model, r.signature, r.op_name, r.status, r.depth, r.failed_stage, r.message,
       count(*) AS occurrences,
       round(count(*) / any_value(t.model_ops), 4) AS share_of_model,
       min(o.position) AS first_position,
       any_value(o.framework_op) AS framework_op
FROM o
JOIN r ON r.signature = o.signature
JOIN totals t ON t.model = o.model
GROUP BY o.model, r.signature, r.op_name, r.status, r.depth, r.failed_stage, r.message
ORDER BY o.model, occurrences DESC, r.signature
