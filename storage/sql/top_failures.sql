-- The most common failure messages of $run_id, grouped by pattern (numbers, shapes, hex
-- addresses, SSA names and paths replaced: message_pattern), weighted by occurrences; `fault` says whose
-- (compiler, device, opbyop, infra).
WITH r AS (
    SELECT r.signature, r.op_name, r.failed_stage, r.message, st.fault,
           coalesce(nullif(message_pattern(message), ''), '(no message)') AS pattern
    FROM results r JOIN statuses st ON st.status = r.status
    WHERE r.run_id = $run_id AND r.status NOT IN ('success', 'skipped')
), occ AS (
    SELECT signature, count(*) AS n, list(DISTINCT model) AS models
    FROM ops WHERE run_id = $run_id AND split_error IS NULL GROUP BY signature
)
SELECT r.fault, r.failed_stage, r.pattern,
       count(*) AS unique_ops,
       coalesce(sum(occ.n), 0)::BIGINT AS occurrences,
       length(list_distinct(flatten(list(coalesce(occ.models, []))))) AS models,
       list(DISTINCT r.op_name ORDER BY r.op_name) AS op_names,
       min(r.message) AS example_message,
       min(r.signature) AS example_signature
FROM r LEFT JOIN occ ON occ.signature = r.signature
GROUP BY r.fault, r.failed_stage, r.pattern
ORDER BY occurrences DESC, unique_ops DESC, r.pattern
LIMIT $limit
