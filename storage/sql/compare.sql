-- Every op of $run_id beside the same op in $prev_run_id (typically two compilers, or two nights),
-- classified: regression / progression (only the compiler's and the device's verdicts count: a
-- failing op that got further is a progression), message (same status and depth, the message's
-- pattern changed), no_verdict (either side is opbyop's or the infrastructure's), same; with status,
-- depth, failing stage and pass, message, pcc, cycles and compile time under each.
WITH cur AS (
    SELECT * FROM results WHERE run_id = $run_id
), prev AS (
    SELECT * FROM results WHERE run_id = $prev_run_id
), occ AS (
    SELECT signature, count(*) AS occurrences, list(DISTINCT model ORDER BY model) AS models
    FROM ops WHERE run_id IN ($run_id, $prev_run_id) AND split_error IS NULL GROUP BY signature
), pair AS (
    SELECT c.signature, c.op_name,
           p.status AS previous_status, c.status, p.depth AS previous_depth, c.depth,
           p.failed_stage AS previous_failed_stage, c.failed_stage,
           p.failed_pass AS previous_failed_pass, c.failed_pass,
           p.message AS previous_message, c.message,
           p.pcc AS previous_pcc, c.pcc, p.cycles AS previous_cycles, c.cycles,
           p.compile_s AS previous_compile_s, c.compile_s,
           c.compile_s - p.compile_s AS compile_s_change,
           sp.rank AS previous_rank, sc.rank AS rank,
           vp.verdict AS previous_verdict, vc.verdict AS verdict
    FROM cur c
    JOIN prev p ON p.signature = c.signature
    JOIN stages sc ON sc.stage = c.depth
    JOIN stages sp ON sp.stage = p.depth
    JOIN statuses vc ON vc.status = c.status
    JOIN statuses vp ON vp.status = p.status
)
SELECT CASE
         WHEN NOT (verdict AND previous_verdict) THEN 'no_verdict'
         WHEN previous_status = 'success' AND status <> 'success' THEN 'regression'
         WHEN previous_status <> 'success' AND status = 'success' THEN 'progression'
         WHEN rank < previous_rank THEN 'regression'
         WHEN rank > previous_rank THEN 'progression'
         WHEN status <> previous_status
           OR message_pattern(message) <> message_pattern(previous_message) THEN 'message'
         ELSE 'same'
       END AS change,
       pair.* EXCLUDE (previous_rank, rank, previous_verdict, verdict),
       coalesce(occ.occurrences, 0) AS occurrences, coalesce(occ.models, []) AS models
FROM pair
LEFT JOIN occ ON occ.signature = pair.signature
ORDER BY CASE change WHEN 'regression' THEN 0 WHEN 'progression' THEN 1 WHEN 'message' THEN 2
                     WHEN 'no_verdict' THEN 3 ELSE 4 END,
         occurrences DESC, signature
