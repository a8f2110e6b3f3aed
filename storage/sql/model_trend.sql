-- Per model over the window $runs (the last $n runs of the same chip and options up to $run_id):
-- the share of its op occurrences that pass, among those the compiler or the device judged (not
-- opbyop's own gaps, not skipped ops), and the whole model's own outcome.
WITH win AS (
    SELECT run_id, started_at FROM runs WHERE run_id IN (SELECT unnest($runs))
)
SELECT win.run_id, win.started_at, m.model, m.ops_total, m.depth_golden, m.ops_judged,
       round(m.depth_golden / nullif(m.ops_judged, 0), 4) AS golden_share,
       m.whole_status, m.whole_depth
FROM win JOIN (SELECT * FROM model_verdicts WHERE run_id IN (SELECT unnest($runs))) m ON m.run_id = win.run_id
ORDER BY m.model, win.started_at
