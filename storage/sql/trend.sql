-- The window $runs (the last $n runs of the same chip and options up to $run_id): unique ops and
-- occurrences by outcome per run, oldest first. golden_share counts only the ops the compiler or
-- the device judged (statuses.verdict); unique_not_judged are opbyop's or the infrastructure's.
WITH win AS (
    SELECT run_id, started_at FROM runs WHERE run_id IN (SELECT unnest($runs))
), u AS (
    SELECT r.run_id, count(*) AS unique_ops,
           count(*) FILTER (WHERE r.depth = 'GOLDEN') AS unique_golden,
           count(*) FILTER (WHERE r.status = 'success') AS unique_success,
           count(*) FILTER (WHERE st.verdict) AS unique_judged,
           count(*) FILTER (WHERE NOT st.verdict AND r.status <> 'skipped') AS unique_not_judged
    FROM results r JOIN statuses st ON st.status = r.status
    WHERE r.run_id IN (SELECT unnest($runs)) GROUP BY r.run_id
), m AS (
    SELECT run_id, count(*) AS models, sum(ops_total) AS occurrences, sum(depth_golden) AS occurrences_golden,
           count(*) FILTER (WHERE ops_total > 0 AND depth_golden = ops_total) AS models_passing
    FROM models WHERE run_id IN (SELECT unnest($runs)) GROUP BY run_id
)
SELECT win.run_id, win.started_at,
       coalesce(m.models, 0) AS models, coalesce(m.models_passing, 0) AS models_passing,
       coalesce(u.unique_ops, 0) AS unique_ops, coalesce(u.unique_golden, 0) AS unique_golden,
       coalesce(u.unique_not_judged, 0) AS unique_not_judged,
       coalesce(m.occurrences, 0)::BIGINT AS occurrences,
       coalesce(m.occurrences_golden, 0)::BIGINT AS occurrences_golden,
       round(coalesce(u.unique_success / nullif(u.unique_judged, 0), 0), 4) AS golden_share
FROM win LEFT JOIN u USING (run_id) LEFT JOIN m USING (run_id)
ORDER BY win.started_at
