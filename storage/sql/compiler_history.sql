-- Across the runs of group $group_id (one per compiler, in the order they ran): per op, its status
-- under each compiler, and the first compiler under which it starts failing (it passed under the one
-- before) or stops failing (it failed under the one before). Only the compiler's and the device's
-- verdicts count; an op without a verdict under a compiler keeps the previous verdict's state.
WITH group_runs AS (
    SELECT run_id, compiler_spec, compiler_version, compiler_key,
           row_number() OVER (ORDER BY started_at, run_id) AS step
    FROM runs WHERE group_id = $group_id
), verdicts AS (
    SELECT r.signature, r.op_name, g.step, g.run_id, g.compiler_spec, g.compiler_version, r.status,
           r.status = 'success' AS passed, st.verdict
    FROM results r
    JOIN group_runs g ON g.run_id = r.run_id
    JOIN statuses st ON st.status = r.status
), judged AS (
    SELECT *, lag(passed) OVER (PARTITION BY signature ORDER BY step) AS passed_before
    FROM verdicts WHERE verdict
)
SELECT v.signature, any_value(v.op_name) AS op_name,
       list(v.compiler_spec || ': ' || v.status ORDER BY v.step) AS statuses,
       arg_min(j.compiler_spec, j.step) FILTER (WHERE j.passed_before AND NOT j.passed) AS starts_failing_under,
       arg_min(j.compiler_spec, j.step) FILTER (WHERE NOT j.passed_before AND j.passed) AS stops_failing_under
FROM verdicts v
LEFT JOIN judged j ON j.signature = v.signature AND j.step = v.step
GROUP BY v.signature
ORDER BY (starts_failing_under IS NULL AND stops_failing_under IS NULL), op_name, signature
