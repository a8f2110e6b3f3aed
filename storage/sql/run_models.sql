-- The models of $run_id: op counts, the share of occurrences at GOLDEN among those the compiler, the
-- device or the frontend judged (not opbyop's gaps, not skipped ops), the whole-model outcome.
WITH m AS (
    SELECT *, coalesce(status_success, 0) + coalesce(status_compile_failed, 0) + coalesce(status_crashed, 0)
              + coalesce(status_timeout, 0) + coalesce(status_run_failed, 0) + coalesce(status_golden_failed, 0)
              + coalesce(status_frontend_failed, 0) + coalesce(status_miscompiled, 0) AS ops_judged,
              coalesce(status_not_simulated, 0) + coalesce(status_analyzer_error, 0) + coalesce(status_infra_error, 0)
              + coalesce(status_simulator_error, 0)
              AS ops_not_judged
    FROM models WHERE run_id = $run_id
)
SELECT model, frontend, ops_total, ops_unique, split_failures, depth_golden AS golden, ops_judged, ops_not_judged,
       round(depth_golden / nullif(ops_judged, 0), 4) AS golden_share, ops_without_result,
       whole_status, whole_depth, whole_failed_stage, whole_pcc, error
FROM m
ORDER BY model
