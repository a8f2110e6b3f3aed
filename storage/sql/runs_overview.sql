-- Every run, newest first, with its number of unique ops and of those at GOLDEN.
WITH u AS (
    SELECT run_id, count(*) AS unique_ops, count(*) FILTER (WHERE depth = 'GOLDEN') AS unique_golden
    FROM results GROUP BY run_id
)
SELECT r.run_id, r.started_at, r.ended_at, r.status, r.chip, r.plugin_version, r.options_key,
       len(r.models) AS models, coalesce(u.unique_ops, 0) AS unique_ops, coalesce(u.unique_golden, 0) AS unique_golden
FROM runs r LEFT JOIN u USING (run_id)
ORDER BY r.started_at DESC
LIMIT $limit
