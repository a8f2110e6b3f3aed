-- The compile failures, crashes and timeouts of $run_id grouped by the compiler pass they stopped
-- in, per model and across all models (model '*'), weighted by occurrences. `outcomes`: how the
-- pass ended (failed | died | hung); a failure whose pass could not be named is grouped as
-- '(no pass named)' with its reasons, one not searched (an older run) as '(not searched)'.
WITH r AS (
    SELECT signature, op_name, failed_stage, failed_pass_outcome AS outcome, failed_pass_position AS position,
           last_good_pass, failed_pass_reason AS reason,
           CASE WHEN failed_pass IS NOT NULL THEN failed_pass
                WHEN failed_pass_outcome IS NULL THEN '(not searched)'
                ELSE '(no pass named)' END AS pass
    FROM results
    WHERE run_id = $run_id AND status IN (SELECT status FROM statuses WHERE fault = 'compiler' AND no_program)
      AND failed_stage IN ('STABLEHLO', 'TTIR', 'TTNN', 'FLATBUFFER')
), o AS (
    SELECT model, signature FROM ops WHERE run_id = $run_id AND split_error IS NULL
)
SELECT coalesce(o.model, '*') AS model, r.pass AS failed_pass,
       count(DISTINCT r.signature) AS unique_ops,
       count(*) AS occurrences,
       list(DISTINCT r.outcome ORDER BY r.outcome) FILTER (WHERE r.outcome IS NOT NULL) AS outcomes,
       list(DISTINCT r.failed_stage ORDER BY r.failed_stage) AS failed_stages,
       list(DISTINCT r.op_name ORDER BY r.op_name) AS op_names,
       min(r.position) AS first_position,
       list(DISTINCT r.last_good_pass ORDER BY r.last_good_pass) FILTER (WHERE r.last_good_pass IS NOT NULL) AS last_good_passes,
       list(DISTINCT r.reason ORDER BY r.reason) FILTER (WHERE r.reason IS NOT NULL) AS reasons,
       min(r.signature) AS example_signature
FROM r JOIN o ON o.signature = r.signature
GROUP BY GROUPING SETS ((o.model, r.pass), (r.pass))
ORDER BY grouping(o.model) DESC, model, occurrences DESC, failed_pass
