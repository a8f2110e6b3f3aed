-- Per model: how many of its op occurrences stopped at each depth (the depth their unique op
-- reached); occurrences whose split failed and ok occurrences without a result are counted apart.
WITH o AS (
    SELECT model, signature, split_error FROM ops WHERE run_id = $run_id
), r AS (
    SELECT signature, depth FROM results WHERE run_id = $run_id
)
SELECT o.model,
       CASE WHEN o.split_error IS NOT NULL THEN 'SPLIT_FAILED'
            WHEN r.depth IS NULL THEN 'NO_RESULT'
            ELSE r.depth END AS depth,
       coalesce(s.rank, CASE WHEN o.split_error IS NOT NULL THEN -2 ELSE -1 END) AS depth_rank,
       count(*) AS occurrences,
       count(DISTINCT o.signature) AS unique_ops
FROM o
LEFT JOIN r ON r.signature = o.signature AND o.split_error IS NULL
LEFT JOIN stages s ON s.stage = r.depth
GROUP BY ALL
ORDER BY o.model, depth_rank
