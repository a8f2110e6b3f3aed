-- The window of trends and pass rates: the last $n runs of the same chip, options and compiler (as
-- asked for) as $run_id that started no later than it, newest first. Queries that take `$runs` get this list (from
-- aggregate.run_query); a constant list lets DuckDB read only those runs' partitions.
SELECT r.run_id
FROM runs r, (SELECT chip, options_key, coalesce(compiler_spec, 'installed') AS compiler_spec, started_at
              FROM runs WHERE run_id = $run_id) cur
WHERE r.chip = cur.chip AND r.options_key = cur.options_key
  AND coalesce(r.compiler_spec, 'installed') = cur.compiler_spec AND r.started_at <= cur.started_at
ORDER BY r.started_at DESC, r.run_id DESC
LIMIT $n
