-- Every unique op of $run_id with the TTNN program it compiled to (the `ttnn_runtime` artifact,
-- read from the workspace's artifact store by `opbyop coverage --run`), its status, message,
-- dtype narrowing, first input's element type and how it fared on ttsim: the rows of the simulator coverage table.
WITH first_input AS (
    SELECT signature, any_value(inputs[1].dtype) AS input_dtype, any_value(outputs[1].dtype) AS output_dtype
    FROM ops WHERE run_id = $run_id AND split_error IS NULL GROUP BY signature
)
SELECT r.signature, r.op_name, r.status, r.message, r.narrowing,
       coalesce(f.input_dtype, f.output_dtype) AS dtype,
       r.artifacts.ttnn_runtime AS ttnn_runtime, r.ttsim_outcome, r.ttsim_op, r.ttsim_message,
       (SELECT any_value(chip) FROM runs WHERE run_id = $run_id) AS chip
FROM results r LEFT JOIN first_input f ON f.signature = r.signature
WHERE r.run_id = $run_id
ORDER BY r.op_name, r.signature
