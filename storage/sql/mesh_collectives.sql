-- Ops of $run_id that ran on a mesh of chips: mesh shape and topology, the collectives each ran,
-- the bytes they moved over the Ethernet links and their cycles, and the largest per-chip peaks.
SELECT r.signature, r.op_name, r.status,
       array_to_string(r.device_mesh_shape, 'x') AS mesh, r.device_topology AS topology,
       list_transform(r.collectives, lambda c: c.op) AS collectives,
       r.collective_bytes, r.collective_cycles, r.cycles,
       list_max(r.chip_peak_dram_bytes) AS max_chip_peak_dram_bytes,
       list_max(r.chip_peak_l1_bytes) AS max_chip_peak_l1_bytes
FROM results r
WHERE r.run_id = $run_id AND len(coalesce(r.device_mesh_shape, [])) > 0
ORDER BY r.collective_cycles DESC, r.op_name, r.signature
