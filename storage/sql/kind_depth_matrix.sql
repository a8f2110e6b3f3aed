-- Op kind (op_name) x depth: unique ops of each kind at each depth, and their occurrences.
WITH r AS (
    SELECT signature, op_name, depth FROM results WHERE run_id = $run_id
), occ AS (
    SELECT signature, count(*) AS n FROM ops WHERE run_id = $run_id AND split_error IS NULL GROUP BY signature
)
SELECT r.op_name,
       count(*) FILTER (WHERE depth = 'SPLIT') AS split,
       count(*) FILTER (WHERE depth = 'STABLEHLO') AS stablehlo,
       count(*) FILTER (WHERE depth = 'TTIR') AS ttir,
       count(*) FILTER (WHERE depth = 'TTNN') AS ttnn,
       count(*) FILTER (WHERE depth = 'FLATBUFFER') AS flatbuffer,
       count(*) FILTER (WHERE depth = 'DEVICE_RUN') AS device_run,
       count(*) FILTER (WHERE depth = 'GOLDEN') AS golden,
       count(*) AS unique_ops,
       coalesce(sum(occ.n), 0)::BIGINT AS occurrences,
       round(count(*) FILTER (WHERE depth = 'GOLDEN') / count(*), 4) AS golden_share
FROM r LEFT JOIN occ ON occ.signature = r.signature
GROUP BY r.op_name
ORDER BY golden_share, unique_ops DESC, r.op_name
