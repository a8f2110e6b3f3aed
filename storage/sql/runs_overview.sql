-- Every run, newest first, with its compiler build, its group (runs started together, one per
-- build), its number of unique ops and of those at GOLDEN.
WITH u AS (
    SELECT r.run_id, count(*) AS unique_ops, count(*) FILTER (WHERE r.depth = 'GOLDEN') AS unique_golden,
           count(*) FILTER (WHERE NOT st.verdict AND r.status <> 'skipped') AS unique_not_judged
    FROM results r JOIN statuses st ON st.status = r.status GROUP BY r.run_id
)
SELECT r.run_id, r.started_at, r.ended_at, r.status, r.chip, r.plugin_version,
       coalesce(r.compiler_spec, 'installed') AS compiler, left(r.compiler_library_sha256, 12) AS library,
       nullif(r.group_id, '') AS group_id, r.options_key,
       len(r.models) AS models, coalesce(u.unique_ops, 0) AS unique_ops, coalesce(u.unique_golden, 0) AS unique_golden,
       coalesce(u.unique_not_judged, 0) AS unique_not_judged
FROM runs r LEFT JOIN u USING (run_id)
ORDER BY r.started_at DESC
LIMIT $limit
