-- Per model over the last $n runs of the same chip and options: the share of its op occurrences
-- that pass, and the whole model's own outcome.
WITH cur AS (
    SELECT chip, options_key, started_at FROM runs WHERE run_id = $run_id
), win AS (
    SELECT r.run_id, r.started_at FROM runs r, cur
    WHERE r.chip = cur.chip AND r.options_key = cur.options_key AND r.started_at <= cur.started_at
    ORDER BY r.started_at DESC
    LIMIT $n
)
SELECT win.run_id, win.started_at, m.model, m.ops_total, m.depth_golden,
       round(m.depth_golden / nullif(m.ops_total, 0), 4) AS golden_share,
       m.whole_status, m.whole_depth
FROM win JOIN models m ON m.run_id = win.run_id
ORDER BY m.model, win.started_at
