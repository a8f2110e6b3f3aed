-- Per op signature: how often it passed (status success), counted per (run, model) in which it
-- occurs, over the window $runs (the last $n runs of the same chip and options up to $run_id).
-- Only the compiler's, the device's and the frontend's verdicts count (statuses.verdict); outcomes that are
-- opbyop's or the infrastructure's (not_simulated, simulator_error, analyzer_error, infra_error) or skipped are
-- counted apart as not_judged.
WITH occ AS (
    SELECT DISTINCT run_id, model, signature FROM ops
    WHERE run_id IN (SELECT unnest($runs)) AND split_error IS NULL
), res AS (
    SELECT r.run_id, r.signature, r.op_name, r.status, st.verdict
    FROM results r JOIN statuses st ON st.status = r.status
    WHERE r.run_id IN (SELECT unnest($runs))
)
SELECT occ.signature,
       any_value(res.op_name) AS op_name,
       count(DISTINCT occ.model) AS models,
       count(DISTINCT occ.run_id) AS runs,
       count(*) FILTER (WHERE res.verdict) AS model_runs,
       count(*) FILTER (WHERE res.status = 'success') AS passes,
       count(*) FILTER (WHERE NOT res.verdict) AS not_judged,
       round(count(*) FILTER (WHERE res.status = 'success') / nullif(count(*) FILTER (WHERE res.verdict), 0), 4)
           AS pass_rate
FROM occ JOIN res ON res.run_id = occ.run_id AND res.signature = occ.signature
GROUP BY occ.signature
ORDER BY pass_rate NULLS LAST, model_runs DESC, occ.signature
