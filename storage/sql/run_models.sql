-- The models of $run_id: op counts, the share of occurrences at GOLDEN among those the compiler, the
-- device or the frontend judged (not opbyop's gaps, not skipped ops), the whole-model outcome.
SELECT model, frontend, ops_total, ops_unique, split_failures, depth_golden AS golden, ops_judged, ops_not_judged,
       round(depth_golden / nullif(ops_judged, 0), 4) AS golden_share, ops_without_result,
       whole_status, whole_depth, whole_failed_stage, whole_pcc, error
FROM model_verdicts
WHERE run_id = $run_id
ORDER BY model
