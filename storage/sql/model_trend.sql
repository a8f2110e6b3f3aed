-- Per model over the window $runs (the last $n runs of the same chip and options up to $run_id):
-- the share of its op occurrences that pass, among those the compiler or the device judged (not
-- opbyop's own gaps, not skipped ops), and the whole model's own outcome.
WITH win AS (
    SELECT run_id, started_at FROM runs WHERE run_id IN (SELECT unnest($runs))
)
SELECT win.run_id, win.started_at, m.model, m.ops_total, m.depth_golden,
       (coalesce(m.status_success, 0) + coalesce(m.status_compile_failed, 0) + coalesce(m.status_crashed, 0) + coalesce(m.status_timeout, 0) + coalesce(m.status_run_failed, 0) + coalesce(m.status_golden_failed, 0) + coalesce(m.status_miscompiled, 0) + coalesce(m.status_frontend_failed, 0)) AS ops_judged,
       round(m.depth_golden / nullif((coalesce(m.status_success, 0) + coalesce(m.status_compile_failed, 0) + coalesce(m.status_crashed, 0) + coalesce(m.status_timeout, 0) + coalesce(m.status_run_failed, 0) + coalesce(m.status_golden_failed, 0) + coalesce(m.status_miscompiled, 0) + coalesce(m.status_frontend_failed, 0)), 0), 4) AS golden_share,
       m.whole_status, m.whole_depth
FROM win JOIN (SELECT * FROM models WHERE run_id IN (SELECT unnest($runs))) m ON m.run_id = win.run_id
ORDER BY m.model, win.started_at
