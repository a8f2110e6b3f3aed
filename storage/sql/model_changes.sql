-- What changed for each of $models between $prev_run_id and $run_id, model by model (an op counts
-- for a model when it occurs in that model's split): regression / progression (depth changed),
-- new (in the model now, not before) and removed (in the model before, not now).
WITH cur_occ AS (
    SELECT model, signature, count(*) AS occurrences FROM ops
    WHERE run_id = $run_id AND split_error IS NULL AND list_contains($models, model) GROUP BY ALL
), prev_occ AS (
    SELECT model, signature, count(*) AS occurrences FROM ops
    WHERE run_id = $prev_run_id AND split_error IS NULL AND list_contains($models, model) GROUP BY ALL
), cur AS (
    SELECT signature, op_name, status, depth, failed_stage, message FROM results WHERE run_id = $run_id
), prev AS (
    SELECT signature, op_name, status, depth, failed_stage, message FROM results WHERE run_id = $prev_run_id
), both_runs AS (
    SELECT co.model, co.signature, c.op_name, p.depth AS previous_depth, c.depth, p.status AS previous_status,
           c.status, c.failed_stage, c.message, co.occurrences, sp.rank AS previous_rank, sc.rank AS rank
    FROM cur_occ co
    JOIN prev_occ po ON po.model = co.model AND po.signature = co.signature
    JOIN cur c ON c.signature = co.signature
    JOIN prev p ON p.signature = co.signature
    JOIN stages sc ON sc.stage = c.depth
    JOIN stages sp ON sp.stage = p.depth
)
SELECT model, CASE WHEN rank < previous_rank THEN 'regression' ELSE 'progression' END AS change,
       signature, op_name, previous_depth, depth, previous_status, status, failed_stage, message, occurrences
FROM both_runs WHERE rank <> previous_rank
UNION ALL
SELECT co.model, 'new', co.signature, c.op_name, NULL, c.depth, NULL, c.status, c.failed_stage, c.message,
       co.occurrences
FROM cur_occ co LEFT JOIN cur c ON c.signature = co.signature
ANTI JOIN prev_occ po ON po.model = co.model AND po.signature = co.signature
UNION ALL
SELECT po.model, 'removed', po.signature, p.op_name, p.depth, NULL, p.status, NULL, NULL, NULL, po.occurrences
FROM prev_occ po LEFT JOIN prev p ON p.signature = po.signature
ANTI JOIN cur_occ co ON co.model = po.model AND co.signature = po.signature
ORDER BY model, change, occurrences DESC, signature
