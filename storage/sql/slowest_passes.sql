-- Where compile time goes in $run_id: each compiler pass's time in the timed ops' compiles (MLIR's
-- pass timing), per op kind, per model (each unique op counted once per model it occurs in) and
-- across the run (op_name and model '*'), slowest first; `share` is the pass's part of the
-- timed compiles' pass time in that group; the first $limit passes of each group. Ops are timed on
-- request (--pass-timing) or on a sample.
WITH t AS (
    SELECT r.signature, r.op_name, p.pass, p.seconds, r.pass_timing_total_s AS total
    FROM results r, unnest(r.pass_timing) AS u(p)
    WHERE r.run_id = $run_id AND r.pass_timing IS NOT NULL
), m AS (
    SELECT DISTINCT model, signature FROM ops WHERE run_id = $run_id AND split_error IS NULL
), by_kind AS (
    SELECT '*' AS model, op_name, pass, sum(seconds) AS seconds, count(DISTINCT signature) AS timed_ops
    FROM t GROUP BY op_name, pass
), by_model AS (
    SELECT m.model, '*' AS op_name, t.pass, sum(t.seconds) AS seconds, count(DISTINCT t.signature) AS timed_ops
    FROM t JOIN m ON m.signature = t.signature GROUP BY m.model, t.pass
), overall AS (
    SELECT '*' AS model, '*' AS op_name, pass, sum(seconds) AS seconds, count(DISTINCT signature) AS timed_ops
    FROM t GROUP BY pass
), g AS (
    SELECT * FROM by_kind UNION ALL SELECT * FROM by_model UNION ALL SELECT * FROM overall
)
SELECT model, op_name, pass, round(seconds, 6) AS seconds, timed_ops,
       round(seconds / nullif(sum(seconds) OVER (PARTITION BY model, op_name), 0), 4) AS share,
       row_number() OVER (PARTITION BY model, op_name ORDER BY seconds DESC, pass) AS rank
FROM g
QUALIFY rank <= $limit
ORDER BY (model = '*' AND op_name = '*') DESC, model, op_name, rank
