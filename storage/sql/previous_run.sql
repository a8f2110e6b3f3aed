-- The completed run of the same chip and options that started last before $run_id.
SELECT p.run_id, p.started_at
FROM runs p, (SELECT chip, options_key, started_at FROM runs WHERE run_id = $run_id) cur
WHERE p.chip = cur.chip AND p.options_key = cur.options_key AND p.started_at < cur.started_at
  AND p.status = 'completed' AND p.run_id <> $run_id
ORDER BY p.started_at DESC
LIMIT 1
