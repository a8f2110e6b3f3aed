-- Per op signature: how often it passed (status success), counted per (run, model) in which it
-- occurs, over the last $n runs of the same chip and options that started no later than $run_id.
WITH cur AS (
    SELECT chip, options_key, started_at FROM runs WHERE run_id = $run_id
), win AS (
    SELECT r.run_id FROM runs r, cur
    WHERE r.chip = cur.chip AND r.options_key = cur.options_key AND r.started_at <= cur.started_at
    ORDER BY r.started_at DESC
    LIMIT $n
), occ AS (
    SELECT DISTINCT run_id, model, signature FROM ops
    WHERE run_id IN (SELECT run_id FROM win) AND split_error IS NULL
), res AS (
    SELECT run_id, signature, op_name, status, depth FROM results WHERE run_id IN (SELECT run_id FROM win)
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
