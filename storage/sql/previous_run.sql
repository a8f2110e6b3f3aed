-- The completed run of the same chip, options, compiler (as asked for: a night of `newest` follows
-- the last `newest`) and models that started last before $run_id (a run of other models is no
-- baseline for the whole run: their ops would show up as new or removed; previous_model_runs
-- compares model by model).
WITH cur AS (
    SELECT chip, options_key, coalesce(compiler_spec, 'installed') AS compiler_spec, started_at
    FROM runs WHERE run_id = $run_id
), run_models AS (
    SELECT run_id, list(model ORDER BY model) AS models FROM models GROUP BY run_id
)
SELECT p.run_id, p.started_at
FROM runs p, cur
JOIN run_models pm ON pm.run_id = p.run_id
JOIN run_models cm ON cm.run_id = $run_id
WHERE p.chip = cur.chip AND p.options_key = cur.options_key
  AND coalesce(p.compiler_spec, 'installed') = cur.compiler_spec AND p.started_at < cur.started_at
  AND p.status = 'completed' AND p.run_id <> $run_id AND pm.models = cm.models
ORDER BY p.started_at DESC
LIMIT 1
