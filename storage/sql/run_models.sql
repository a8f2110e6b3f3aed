-- The models of $run_id: op counts, the share of occurrences at GOLDEN, the whole-model outcome.
SELECT model, frontend, ops_total, ops_unique, split_failures, depth_golden AS golden,
       round(depth_golden / nullif(ops_total, 0), 4) AS golden_share, ops_without_result,
       whole_status, whole_depth, whole_failed_stage, whole_pcc, error
FROM models WHERE run_id = $run_id
ORDER BY model
