-- Ops that got further in $run_id than in $prev_run_id (was shallower, now deeper).
SELECT * FROM (
    -- include: _depth_change
) WHERE rank > previous_rank
ORDER BY rank - previous_rank DESC, occurrences DESC, signature
