"""Simulating a mesh program against simulating one chip: the checked-in TTNN programs compiled for
meshes (tests/data/mesh: 1x2, 1x4, 2x2, 2x4), each run on its mesh of simulated chips.

    .venv/bin/python benchmarks/bench_mesh_device.py [--repeat 5]

Goal: a mesh run costs no more than one chip's run plus the collectives' own simulation.
Baseline, measured in the same run: one chip's share of the program, i.e. a run in which every chip
runs every op in full (`share=False`, chips one after another), its non-collective time divided by
its chips; the collectives' time is measured apart. The mesh run shares what the chips have in
common (op models, kernels on equal operands); each chip still computes its own shard.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from common import Figures

from opbyop.device.mesh_runtime import MeshSimulator, module_shapes
from opbyop.device.runtime import Binary

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "mesh"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    figures = Figures("mesh runs (median of repeats, ms)",
                      ["program", "chips", "mesh run", "every chip in full", "one chip, collectives aside",
                       "collectives", "mesh / (one chip + collectives)", "before / (one chip + collectives)",
                       "collective bytes", "cycles"])
    simulator, unshared = MeshSimulator(), MeshSimulator(share=False)
    ratios, befores = [], []
    for case in sorted(p.parent for p in DATA.glob("*/*/ttnn_runtime.mlir")):
        program, module = (case / "ttnn_runtime.mlir").read_text(), (case / "stablehlo.mlir").read_text()
        shapes, _ = module_shapes(module)
        inputs = [np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in shapes]
        binary = Binary.load(program)  # loaded once, as the pipeline does: the runs are what is measured
        walls, colls, fulls = [], [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            full = unshared.run_binary(binary, inputs, stablehlo=module)
            fulls.append((time.perf_counter() - start, full.run.collective_seconds))
            start = time.perf_counter()
            result = simulator.run_binary(binary, inputs, stablehlo=module)
            walls.append(time.perf_counter() - start)
            colls.append(result.run.collective_seconds)
        wall, coll = statistics.median(walls), statistics.median(colls)
        full_wall = statistics.median(w for w, _ in fulls)
        full_coll = statistics.median(c for _, c in fulls)
        chips = result.run.mesh_shape[0] * result.run.mesh_shape[1]
        one_chip = (full_wall - full_coll) / chips
        assert result.run.cycles == full.run.cycles, "sharing changed the simulated cycles"
        for a, b in zip(result.outputs, full.outputs):
            np.testing.assert_array_equal(a, b, "sharing changed the values")
        ratio, before = wall / (one_chip + coll), full_wall / (one_chip + full_coll)
        ratios.append(ratio)
        befores.append(before)
        figures.add(f"{case.parent.name}/{case.name}", chips, 1000 * wall, 1000 * full_wall, 1000 * one_chip,
                    1000 * coll, ratio, before, result.run.collective_bytes, result.run.cycles)
    simulator.close()
    unshared.close()
    figures.show()
    print(f"median mesh / (one chip + collectives): {statistics.median(ratios):.2f} shared, "
          f"{statistics.median(befores):.2f} every chip in full (1.0: chips beyond the first cost nothing)")


if __name__ == "__main__":
    main()
