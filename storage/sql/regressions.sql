-- Ops that got less far in $run_id than in $prev_run_id (was deeper, now shallower).
SELECT * FROM (
    -- include: _depth_change
) WHERE rank < previous_rank
ORDER BY previous_rank - rank DESC, occurrences DESC, signature
