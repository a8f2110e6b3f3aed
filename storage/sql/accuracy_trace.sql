-- Where each whole model of $run_id loses accuracy: every op compared along the model's depth (its
-- PCC against XLA:CPU's run of the whole model), the first op below the threshold marked, and
-- `added_loss`, the PCC an op lost beyond the worst of its inputs' (the ops adding most error);
-- `backend` says whose values were traced: the device model's (model) or ttsim's (ttsim).
SELECT model, backend, position, op_name, ttnn_op, pcc, max_abs_error, added_loss, below_threshold, first_below,
       rank() OVER (PARTITION BY model, backend ORDER BY added_loss DESC) AS loss_rank, location
FROM accuracy_traces
WHERE run_id = $run_id
ORDER BY model, backend, position
