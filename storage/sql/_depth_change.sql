WITH cur AS (
    SELECT r.signature, r.op_name, r.status, r.depth, r.failed_stage, r.message FROM results r
    JOIN statuses st ON st.status = r.status WHERE r.run_id = $run_id AND st.verdict
), prev AS (
    -- only the compiler's and the device's verdicts compare: an op that went from success to
    -- not_simulated or simulator_error is opbyop's change, not a regression of the compiler
    SELECT r.signature, r.status, r.depth, r.failed_stage, r.message FROM results r
    JOIN statuses st ON st.status = r.status WHERE r.run_id = $prev_run_id AND st.verdict
), occ AS (
    SELECT signature, count(*) AS occurrences, list(DISTINCT model ORDER BY model) AS models
    FROM ops WHERE run_id = $run_id AND split_error IS NULL GROUP BY signature
)
SELECT c.signature, c.op_name,
       p.depth AS previous_depth, c.depth, sp.rank AS previous_rank, sc.rank AS rank,
       p.status AS previous_status, c.status, c.failed_stage, c.message, p.message AS previous_message,
       coalesce(occ.occurrences, 0) AS occurrences, coalesce(occ.models, []) AS models
FROM cur c
JOIN prev p ON p.signature = c.signature
JOIN stages sc ON sc.stage = c.depth
JOIN stages sp ON sp.stage = p.depth
LEFT JOIN occ ON occ.signature = c.signature
