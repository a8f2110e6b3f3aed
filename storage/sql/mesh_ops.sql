-- Sharded ops of $run_id: per op, the mesh its module is sharded over, its operand and result
-- shardings, and its outcome on the run's target mesh (a sharded model's ops only).
WITH sharded AS (
    SELECT signature, any_value(mesh) AS module_mesh, any_value(operand_shardings) AS operand_shardings,
           any_value(result_shardings) AS result_shardings, count(*) AS occurrences,
           list(DISTINCT model ORDER BY model) AS models
    FROM ops WHERE run_id = $run_id AND split_error IS NULL AND mesh IS NOT NULL GROUP BY signature
)
SELECT r.op_name, s.module_mesh, r.mesh AS target_mesh, r.topology, r.status, r.depth, r.failed_stage,
       s.operand_shardings, s.result_shardings, s.occurrences, s.models, r.message, r.signature
FROM results r JOIN sharded s ON s.signature = r.signature
WHERE r.run_id = $run_id
ORDER BY r.op_name, r.signature
