-- Per model: the unique ops that keep it from passing (the compiler, the device or the frontend failed them),
-- heaviest first, weighted by how often each occurs in that model. opbyop's own gaps
-- (not_simulated, simulator_error, analyzer_error) and skipped ops are not blockers: see query opbyop_gaps.
WITH o AS (
    SELECT model, signature, position, framework_op FROM ops WHERE run_id = $run_id AND split_error IS NULL
), r AS (
    SELECT r.signature, r.op_name, r.status, r.depth, r.failed_stage, r.message
    FROM results r JOIN statuses st ON st.status = r.status
    WHERE r.run_id = $run_id AND st.verdict AND r.status <> 'success'
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
