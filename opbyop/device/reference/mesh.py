"""The reference reading of a mesh program: every chip's program read in exact arithmetic, all chips
in step, each on its own shard; a collective takes every chip's values at once and moves them as
TTNN's CCL op defines (opbyop.device.reference.collectives: its own reading, not the simulator's
collective kernels). The same program the mesh simulator runs, read without any chip's numerics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from opbyop.device.mesh import Mesh
from opbyop.device.program import Op, Program
from opbyop.device.reference.collectives import COLLECTIVES
from opbyop.device.reference.interpreter import (
    _host_value,
    _Interpreter,
    fit,
    unreadable_ops,
)
from opbyop.device.reference.semantics import Unreadable


@dataclass
class MeshReading:
    """Each chip's outputs of the entry, and every op's first result on each chip, keyed
    (chip, value id) as the mesh simulator's trace is."""

    chip_outputs: list[list[np.ndarray]]  # per chip, per output
    trace: dict[tuple[int, int], tuple[Op, np.ndarray]] = field(default_factory=dict)


def read_mesh_program(program: Program, mesh: Mesh, chip_inputs: Sequence[Sequence[np.ndarray]]) -> MeshReading:
    """The entry on every chip of `mesh`, chip `c` given `chip_inputs[c]` (its shards, host values);
    Unreadable names what the reference cannot read."""
    missing = [name for name in unreadable_ops(program) if name not in COLLECTIVES]
    if missing:
        raise Unreadable(", ".join(missing))
    main = program.main
    readers = [_Interpreter(program) for _ in range(mesh.size)]
    envs: list[dict] = []
    for inputs in chip_inputs:
        if len(inputs) != len(main.arguments):
            raise Unreadable(f"@{main.name} takes {len(main.arguments)} values, got {len(inputs)}")
        envs.append({v: fit(_host_value(x, t), t) for v, x, t in zip(main.arguments, inputs, main.argument_types)})
    for op in main.ops:
        if op.name in COLLECTIVES:
            _collective(op, mesh, envs, readers)
        else:
            for reader, env in zip(readers, envs):
                reader.step(op, env)
    trace = {(chip, v): entry for chip, reader in enumerate(readers) for v, entry in reader.trace.items()}
    return MeshReading(chip_outputs=[[env[v] for v in main.returns] for env in envs], trace=trace)


def _collective(op: Op, mesh: Mesh, envs: list[dict], readers: list[_Interpreter]) -> None:
    inputs = [[env.get(v) for v in op.operands] for env in envs]
    results = COLLECTIVES[op.name](op, mesh.shape, inputs)
    for chip, env in enumerate(envs):
        for v, value, t in zip(op.results, results[chip], op.result_types):
            fitted = fit(np.asarray(value).reshape(t.shape) if t is not None else value, t)
            env[v] = fitted
            readers[chip].trace.setdefault(v, (op, fitted))
