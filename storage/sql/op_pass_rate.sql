-- Per op signature: how often it passed (status success), counted per (run, model) in which it
-- occurs, over the window $runs (the last $n runs of the same chip and options up to $run_id).
WITH occ AS (
    SELECT DISTINCT run_id, model, signature FROM ops
    WHERE run_id IN (SELECT unnest($runs)) AND split_error IS NULL
), res AS (
    SELECT run_id, signature, op_name, status FROM results WHERE run_id IN (SELECT unnest($runs))
)
SELECT occ.signature,
       any_value(res.op_name) AS op_name,
       count(DISTINCT occ.model) AS models,
       count(DISTINCT occ.run_id) AS runs,
       count(*) AS model_runs,
       count(*) FILTER (WHERE res.status = 'success') AS passes,
       round(count(*) FILTER (WHERE res.status = 'success') / count(*), 4) AS pass_rate
FROM occ JOIN res ON res.run_id = occ.run_id AND res.signature = occ.signature
GROUP BY occ.signature
ORDER BY pass_rate, model_runs DESC, occ.signature
