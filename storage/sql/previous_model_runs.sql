-- Per model of $run_id: the completed run of the same chip, options and compiler (as asked for) that
-- started last before it and in which that model was split (NULL when there is none): the baseline
-- of that model.
WITH cur AS (
    SELECT chip, options_key, coalesce(compiler_spec, 'installed') AS compiler_spec, started_at
    FROM runs WHERE run_id = $run_id
), candidates AS (
    SELECT m.model, p.run_id, p.started_at
    FROM runs p, cur
    JOIN models m ON m.run_id = p.run_id AND m.error IS NULL
    WHERE p.chip = cur.chip AND p.options_key = cur.options_key
      AND coalesce(p.compiler_spec, 'installed') = cur.compiler_spec AND p.started_at < cur.started_at
      AND p.status = 'completed' AND p.run_id <> $run_id
)
SELECT m.model, arg_max(c.run_id, c.started_at) AS previous_run_id
FROM (SELECT model FROM models WHERE run_id = $run_id AND error IS NULL) m
LEFT JOIN candidates c ON c.model = m.model
GROUP BY m.model
ORDER BY m.model
